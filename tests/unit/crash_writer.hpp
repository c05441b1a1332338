// SPDX-License-Identifier: MIT
// Crash consistency of writes: a child process writes a file through
// Phoenix and reports every request the library returned as done through a
// pipe; the parent SIGKILLs it mid-way and checks what reached the file.
//
// Request i covers file bytes [i * request_size, (i + 1) * request_size) and
// holds test::pattern_byte(seed, offset) at every file offset, so any byte of
// the file says which request could have put it there.
//
// The claim checked (docs/hardening.md, "Crash consistency of writes"):
//  1. every request reported done is in the file, whole and byte for byte,
//     for every later reader of the file (page cache or device: a process
//     death loses neither; power loss is another matter, see File::sync());
//  2. no byte differs from the pattern except bytes never written (zeros):
//     nothing lands at a wrong offset, nothing is half old, half new;
//  3. nothing lies past the requests the writer can have started: with
//     depth 1 (File::write, one request at a time) the file is exactly a
//     prefix of the request stream, i.e. the reported requests whole plus at
//     most a leading part of the next one; with depth d (IoQueue) every byte
//     past the first unreported request is pattern or zero and the file ends
//     within d requests after the reported ones.
#ifndef PHOENIX_TESTS_CRASH_WRITER_HPP
#define PHOENIX_TESTS_CRASH_WRITER_HPP

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "phoenix/phoenix.hpp"

namespace phx::test::crash {

struct Plan {
  std::size_t request_size = 1U << 20;
  std::size_t requests = 64;  ///< the writer would stop after these (it should be killed first)
  unsigned depth = 1;         ///< 1: File::write per request; more: an IoQueue of this depth
  std::uint64_t seed = 1;
  std::size_t kill_after = 4;  ///< reports the parent waits for before SIGKILL
  DirectIo direct = DirectIo::off;
};

/// Opens the device and registers the memory the writer copies from: at
/// least depth * request_size bytes.  Runs in the child.
struct Source {
  Device device;
  Registration registration;
};
using SourceFactory = std::function<Source(const Plan &)>;

/// What the parent saw.
struct Outcome {
  std::vector<std::uint64_t> reported;  ///< request indices, in report order
  bool killed = false;                  ///< the child died of our SIGKILL
  int exit_status = -1;                 ///< when it was not killed
  std::string child_error;              ///< the child's message when it failed
};

/// Forks a writer of @p plan into @p path (created, truncated), waits for
/// plan.kill_after reports, SIGKILLs it and collects every report it sent.
[[nodiscard]] Outcome run_and_kill(const Plan &plan, const std::filesystem::path &path,
                                   const SourceFactory &make_source);

/// Checks the file against claims 1-3 above; returns "" when they hold,
/// otherwise what does not (request, offset, byte found and expected).
[[nodiscard]] std::string check_file(const Plan &plan, const std::filesystem::path &path,
                                     const std::vector<std::uint64_t> &reported);

/// Requests found partly written: kills that landed inside a request.
[[nodiscard]] std::size_t partial_requests(const Plan &plan, const std::filesystem::path &path);

}  // namespace phx::test::crash

#endif  // PHOENIX_TESTS_CRASH_WRITER_HPP
