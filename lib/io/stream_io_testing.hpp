// SPDX-License-Identifier: MIT
// Test seams of stream-ordered I/O (lib/io/stream_io.cpp).  Tests only:
// nothing in the library or its public headers calls these.
#ifndef PHOENIX_LIB_STREAM_IO_TESTING_HPP
#define PHOENIX_LIB_STREAM_IO_TESTING_HPP

#include <cstddef>

namespace phx::detail::testing {

/// Negative control for the ordering tests: while set, ops submitted from
/// then on skip every wait that orders them in their stream (the event on
/// the work before them, the stream's waits on the I/O thread's flags, the
/// I/O thread's wait for a write's copy).  The ordering tests must then
/// fail; if they pass, they test nothing.
void set_ignore_stream_order(bool ignore) noexcept;

/// Stream-ordered I/O threads of every device that have not exited yet.
[[nodiscard]] std::size_t live_stream_workers() noexcept;

/// Lanes beyond an op's own I/O thread that read chunks of a staged read
/// (StreamLimits::lanes), ever, in this process.
[[nodiscard]] std::size_t stream_lane_helpers() noexcept;

}  // namespace phx::detail::testing

#endif  // PHOENIX_LIB_STREAM_IO_TESTING_HPP
