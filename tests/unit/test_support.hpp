// SPDX-License-Identifier: MIT
// Shared fixtures for the unit tests: temporary directories, a pattern any
// byte of which can be recomputed from its file offset, scratch mounts.
#ifndef PHOENIX_TESTS_TEST_SUPPORT_HPP
#define PHOENIX_TESTS_TEST_SUPPORT_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace phx::test {

/// A fresh directory under $TMPDIR (default /var/tmp: a disk filesystem
/// with O_DIRECT, unlike tmpfs on older kernels), removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  TempDir(TempDir &&) = delete;
  TempDir &operator=(TempDir &&) = delete;
  [[nodiscard]] const std::filesystem::path &path() const { return path_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string &name) const {
    return path_ / name;
  }

 private:
  std::filesystem::path path_;
};

/// Byte at file offset @p offset of the pattern for @p seed.
[[nodiscard]] std::byte pattern_byte(std::uint64_t seed, std::uint64_t offset);
void fill_pattern(std::span<std::byte> dst, std::uint64_t seed, std::uint64_t offset);
/// Offset of the first byte differing from the pattern, or nullopt.
[[nodiscard]] std::optional<std::uint64_t> find_mismatch(std::span<const std::byte> data,
                                                         std::uint64_t seed, std::uint64_t offset);

/// Writes @p size bytes of the pattern with plain buffered I/O and fsyncs.
void write_pattern_file(const std::filesystem::path &path, std::uint64_t size, std::uint64_t seed);
/// A sparse file of @p size bytes whose last @p tail bytes hold the pattern
/// (the rest is a hole that reads as zeros): huge files at no disk cost.
void write_sparse_file(const std::filesystem::path &path, std::uint64_t size, std::size_t tail,
                       std::uint64_t seed);
[[nodiscard]] std::vector<std::byte> read_whole_file(const std::filesystem::path &path);

/// Bytes this process has had the block layer read (/proc/self/io
/// read_bytes): what tells an O_DIRECT read of a cached range (the disk)
/// from a buffered one (memory).
[[nodiscard]] std::uint64_t storage_read_bytes();

/// Makes a FIFO at @p fifo and runs @p body, which opens it, on another
/// thread.  True when body returned within @p seconds while nothing had
/// the FIFO open for writing; otherwise the FIFO is opened for writing
/// (which releases an open() waiting for a writer) and, once body has
/// returned, false.
[[nodiscard]] bool returns_without_a_fifo_writer(const std::filesystem::path &fifo,
                                                 const std::function<void()> &body,
                                                 int seconds = 10);

/// Page-aligned heap buffer.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(std::size_t size, std::size_t align = 4096);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
  AlignedBuffer(AlignedBuffer &&) = delete;
  AlignedBuffer &operator=(AlignedBuffer &&) = delete;
  [[nodiscard]] std::byte *data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::span<std::byte> span() const { return {data_, size_}; }

 private:
  std::byte *data_;
  std::size_t size_;
};

/// A filesystem mounted on a private directory for one test; needs root.
class ScratchMount {
 public:
  /// Returns nullopt with @p why set when it cannot mount (not root, ...).
  static std::optional<ScratchMount> make(const std::string &fstype, const std::string &options,
                                          std::string &why);
  ~ScratchMount();
  ScratchMount(ScratchMount &&other) noexcept;
  ScratchMount &operator=(ScratchMount &&) = delete;
  ScratchMount(const ScratchMount &) = delete;
  ScratchMount &operator=(const ScratchMount &) = delete;
  [[nodiscard]] const std::filesystem::path &path() const { return path_; }

 private:
  explicit ScratchMount(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

}  // namespace phx::test

#endif  // PHOENIX_TESTS_TEST_SUPPORT_HPP
