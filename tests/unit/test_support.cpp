// SPDX-License-Identifier: MIT
#include "test_support.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <stdexcept>
#include <system_error>

namespace phx::test {
namespace {

std::filesystem::path temp_root() {
  const char *dir = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe)
  return dir != nullptr && *dir != '\0' ? std::filesystem::path(dir)
                                        : std::filesystem::path("/var/tmp");
}

// splitmix64: every 8-byte word is a function of its index, so any range of
// the pattern can be checked without the rest.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = (temp_root() / "phx-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::system_error(errno, std::system_category(), "mkdtemp " + tmpl);
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::byte pattern_byte(std::uint64_t seed, std::uint64_t offset) {
  const std::uint64_t word = mix(seed * 0x100000001b3ULL + offset / 8);
  return static_cast<std::byte>(word >> ((offset % 8) * 8));
}

void fill_pattern(std::span<std::byte> dst, std::uint64_t seed, std::uint64_t offset) {
  std::size_t i = 0;
  // Whole words at a time: the pattern is generated for hundreds of MiB.
  for (; i < dst.size() && (offset + i) % 8 != 0; ++i) {
    dst[i] = pattern_byte(seed, offset + i);
  }
  for (; i + 8 <= dst.size(); i += 8) {
    const std::uint64_t word = mix(seed * 0x100000001b3ULL + (offset + i) / 8);
    std::memcpy(dst.data() + i, &word, 8);  // little-endian, as pattern_byte
  }
  for (; i < dst.size(); ++i) {
    dst[i] = pattern_byte(seed, offset + i);
  }
}

std::optional<std::uint64_t> find_mismatch(std::span<const std::byte> data, std::uint64_t seed,
                                           std::uint64_t offset) {
  std::vector<std::byte> expected(std::min<std::size_t>(data.size(), std::size_t{1} << 20));
  for (std::size_t base = 0; base < data.size(); base += expected.size()) {
    const std::size_t n = std::min(expected.size(), data.size() - base);
    fill_pattern({expected.data(), n}, seed, offset + base);
    if (std::memcmp(expected.data(), data.data() + base, n) == 0) {
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (expected[i] != data[base + i]) {
        return offset + base + i;
      }
    }
  }
  return std::nullopt;
}

void write_pattern_file(const std::filesystem::path &path, std::uint64_t size, std::uint64_t seed) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw std::system_error(errno, std::system_category(), "create " + path.string());
  }
  std::vector<std::byte> chunk(std::size_t{1} << 20);
  for (std::uint64_t off = 0; off < size;) {
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), size - off));
    fill_pattern({chunk.data(), n}, seed, off);
    const ssize_t w = ::pwrite(fd, chunk.data(), n, static_cast<off_t>(off));
    if (w <= 0) {
      ::close(fd);
      throw std::system_error(errno, std::system_category(), "write " + path.string());
    }
    off += static_cast<std::uint64_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
}

void write_sparse_file(const std::filesystem::path &path, std::uint64_t size, std::size_t tail,
                       std::uint64_t seed) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw std::system_error(errno, std::system_category(), "create " + path.string());
  }
  std::vector<std::byte> data(tail);
  fill_pattern(data, seed, size - tail);
  const bool ok = ::ftruncate(fd, static_cast<off_t>(size)) == 0 &&
                  ::pwrite(fd, data.data(), tail, static_cast<off_t>(size - tail)) ==
                      static_cast<ssize_t>(tail);
  const int err = errno;
  ::close(fd);
  if (!ok) {
    throw std::system_error(err, std::system_category(), "write " + path.string());
  }
}

bool returns_without_a_fifo_writer(const std::filesystem::path &fifo,
                                   const std::function<void()> &body, int seconds) {
  if (::mkfifo(fifo.c_str(), 0600) != 0) {
    throw std::system_error(errno, std::system_category(), "mkfifo " + fifo.string());
  }
  std::future<void> done = std::async(std::launch::async, body);
  if (done.wait_for(std::chrono::seconds(seconds)) == std::future_status::ready) {
    done.get();
    return true;
  }
  // Succeeds only while a reader has the FIFO open (or is waiting to).
  const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  done.wait();
  if (writer >= 0) {
    ::close(writer);
  }
  return false;
}

std::vector<std::byte> read_whole_file(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    throw std::runtime_error("cannot read " + path.string());
  }
  // One read of the whole size: a stream iterator per byte took minutes a
  // test in the unoptimised sanitizer builds.
  std::vector<char> raw(static_cast<std::size_t>(in.tellg()));
  in.seekg(0);
  if (!in.read(raw.data(), static_cast<std::streamsize>(raw.size()))) {
    throw std::runtime_error("short read of " + path.string());
  }
  std::vector<std::byte> out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

AlignedBuffer::AlignedBuffer(std::size_t size, std::size_t align)
    : data_(static_cast<std::byte *>(
          std::aligned_alloc(align, (std::max<std::size_t>(size, 1) + align - 1) / align * align))),
      size_(size) {
  if (data_ == nullptr) {
    throw std::bad_alloc();
  }
  std::memset(data_, 0, size_);
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}  // NOLINT(cppcoreguidelines-no-malloc)

std::optional<ScratchMount> ScratchMount::make(const std::string &fstype,
                                               const std::string &options, std::string &why) {
  if (::geteuid() != 0) {
    why = "needs root to mount a scratch " + fstype;
    return std::nullopt;
  }
  std::string tmpl = (temp_root() / ("phx-mnt-" + fstype + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    why = "mkdtemp failed: " + std::string(std::strerror(errno));  // NOLINT(concurrency-mt-unsafe)
    return std::nullopt;
  }
  if (::mount(fstype.c_str(), tmpl.c_str(), fstype.c_str(), 0, options.c_str()) != 0) {
    why =
        "mount -t " + fstype + " failed: " + std::strerror(errno);  // NOLINT(concurrency-mt-unsafe)
    ::rmdir(tmpl.c_str());
    return std::nullopt;
  }
  return ScratchMount(tmpl);
}

ScratchMount::ScratchMount(ScratchMount &&other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

ScratchMount::~ScratchMount() {
  if (!path_.empty()) {
    ::umount2(path_.c_str(), MNT_DETACH);
    ::rmdir(path_.c_str());
  }
}

std::uint64_t storage_read_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "read_bytes:") {
      return value;
    }
  }
  throw std::runtime_error("/proc/self/io has no read_bytes (no task I/O accounting)");
}

}  // namespace phx::test
