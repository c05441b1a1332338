// SPDX-License-Identifier: MIT
// GPU memory for phx-cufile-bench through the CUDA driver API, loaded from
// the library libphoenix and the shim load (PHX_CUDA_DRIVER, else
// libcuda.so.1): the same driver on a GPU and on tests/fakecuda, where the
// CUDA runtime would find no device.
#ifndef PHX_TOOLS_CUFILE_BENCH_CUDA_DRIVER_HPP
#define PHX_TOOLS_CUFILE_BENCH_CUDA_DRIVER_HPP

#include <cstddef>
#include <cstdint>
#include <string>

namespace phxcufile {

/// The driver, initialised, with CUDA device @p ordinal's primary context
/// current on the constructing thread.  Throws phxtools::Unavailable when
/// the driver does not load or has no such device.
class CudaDriver {
 public:
  explicit CudaDriver(int ordinal);
  CudaDriver(const CudaDriver &) = delete;
  CudaDriver &operator=(const CudaDriver &) = delete;
  CudaDriver(CudaDriver &&) = delete;
  CudaDriver &operator=(CudaDriver &&) = delete;
  ~CudaDriver();

  /// The library loaded (its file name as dladdr reports it).
  [[nodiscard]] const std::string &path() const noexcept { return path_; }
  /// Microseconds cuInit and the primary context took (kept out of every
  /// cuFile figure: NVIDIA's driver open needs the context first).
  [[nodiscard]] double init_us() const noexcept { return init_us_; }

  /// cuMemAlloc; throws std::runtime_error naming the size.
  [[nodiscard]] void *alloc(std::size_t bytes);
  void free(void *ptr) noexcept;
  void to_device(void *dst, const void *src, std::size_t bytes);
  void to_host(void *dst, const void *src, std::size_t bytes);

 private:
  void check(int result, const std::string &what) const;

  void *lib_ = nullptr;
  std::string path_;
  double init_us_ = 0;
  int ordinal_;
  void *context_ = nullptr;
  int (*init_)(unsigned) = nullptr;
  int (*device_get_)(int *, int) = nullptr;
  int (*retain_)(void **, int) = nullptr;
  int (*release_)(int) = nullptr;
  int (*set_current_)(void *) = nullptr;
  int (*alloc_)(std::uint64_t *, std::size_t) = nullptr;
  int (*free_)(std::uint64_t) = nullptr;
  int (*htod_)(std::uint64_t, const void *, std::size_t) = nullptr;
  int (*dtoh_)(void *, std::uint64_t, std::size_t) = nullptr;
  int (*error_name_)(int, const char **) = nullptr;
};

/// GPU memory that frees itself.
class GpuBuffer {
 public:
  GpuBuffer(CudaDriver &driver, std::size_t bytes)
      : driver_(driver), data_(driver.alloc(bytes)), size_(bytes) {}
  GpuBuffer(const GpuBuffer &) = delete;
  GpuBuffer &operator=(const GpuBuffer &) = delete;
  GpuBuffer(GpuBuffer &&) = delete;
  GpuBuffer &operator=(GpuBuffer &&) = delete;
  ~GpuBuffer() { driver_.free(data_); }
  [[nodiscard]] void *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  CudaDriver &driver_;
  void *data_;
  std::size_t size_;
};

}  // namespace phxcufile

#endif  // PHX_TOOLS_CUFILE_BENCH_CUDA_DRIVER_HPP
