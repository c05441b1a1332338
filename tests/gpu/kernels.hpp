// SPDX-License-Identifier: MIT
// Kernels for the stream-ordering tests (kernels.cu).
#ifndef PHOENIX_TESTS_GPU_KERNELS_HPP
#define PHOENIX_TESTS_GPU_KERNELS_HPP

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace phx::test {

/// On @p stream: spins about @p milliseconds, then sets byte i of @p buf to
/// (seed + i * 7) & 0xff.  Slow on purpose: an I/O that does not wait for it
/// sees the old bytes.
void launch_slow_fill(void *buf, std::size_t size, std::uint8_t seed, double milliseconds,
                      cudaStream_t stream);

/// The byte pattern launch_slow_fill writes, computed on the host.
[[nodiscard]] std::uint8_t slow_fill_byte(std::uint8_t seed, std::size_t index);

/// On @p stream: *@p sum (device memory, zeroed first) = sum of buf[i] * (i % 251 + 1).
void launch_checksum(const void *buf, std::size_t size, unsigned long long *sum,
                     cudaStream_t stream);

/// The same checksum on the host.
[[nodiscard]] unsigned long long host_checksum(const void *buf, std::size_t size);

}  // namespace phx::test

#endif  // PHOENIX_TESTS_GPU_KERNELS_HPP
