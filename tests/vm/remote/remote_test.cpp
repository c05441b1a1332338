// SPDX-License-Identifier: MIT
// phx-remote-test: libphoenix's direct engine over remote storage in the
// rig's guest.  Device memory is a range of the PCI BAR provider's device 1
// (device addresses are BAR byte offsets); the remote storage is an NVMe over
// Fabrics namespace or an NFS mount that the kernel's own target/server
// exports from the rig's emulated disks on loopback.  Every transfer is
// checked in the guest against an independent path (the local NVMe namespace
// or the exported ext4 file, read into RAM), and reported as PHX-EVIDENCE so
// that the host compares the BAR's backing file with its disk image after the
// VM exits.  One JSON line per transfer gives its rate.
//
//   phx-remote-test block NAME REMOTE_DEV LOCAL_DEV BAR_OFF READ_OFF WRITE_OFF LEN
//   phx-remote-test file NAME MOUNT_DIR EXPORT_DIR EXT4_REL BAR_OFF LEN
//
// block: reads LEN bytes at READ_OFF of REMOTE_DEV into device memory
// [BAR_OFF, +LEN) and writes device memory [BAR_OFF+LEN, +LEN) to WRITE_OFF;
// LOCAL_DEV is the same disk seen locally.  file: the same through
// MOUNT_DIR/NAME-read.bin and NAME-write.bin, which are EXPORT_DIR's files
// (EXT4_REL: EXPORT_DIR's path on the rig's ext4 disk).  Exit 0 when every
// byte matched, 1 otherwise, 2 on a usage error.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "phoenix/phoenix.hpp"

namespace {

constexpr int kDevice = 1;
constexpr std::size_t kAlign = 4096;

struct FreeDeleter {
  void operator()(std::byte *p) const noexcept { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, FreeDeleter>;

AlignedBuffer aligned_buffer(std::size_t n) {
  void *p = std::aligned_alloc(kAlign, (n + kAlign - 1) / kAlign * kAlign);
  if (p == nullptr) {
    throw std::bad_alloc();
  }
  return AlignedBuffer(static_cast<std::byte *>(p));
}

void fill_pattern(std::byte *dst, std::size_t n, std::uint64_t seed) {
  std::uint64_t x = seed;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    dst[i] = static_cast<std::byte>(x >> 56);
  }
}

std::uint64_t parse_u64(std::string_view what, const char *text) {
  char *end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0') {
    throw std::invalid_argument(std::string(what) + ": not a number: " + text);
  }
  return v;
}

void *dev_addr(std::uint64_t bar_offset) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): pcibar device addresses are BAR offsets
  return reinterpret_cast<void *>(bar_offset);
}

class Fd {
 public:
  Fd(const std::filesystem::path &path, int flags, mode_t mode = 0644)
      : fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)) {
    if (fd_ < 0) {
      throw std::system_error(errno, std::generic_category(), "open " + path.string());
    }
  }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  Fd(Fd &&) = delete;
  Fd &operator=(Fd &&) = delete;
  ~Fd() { ::close(fd_); }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// Reads [off, off + n) of path into RAM: O_DIRECT for block devices (so
// nothing cached locally can stand in for the disk), buffered for files.
void read_reference(const std::filesystem::path &path, bool direct, std::byte *dst, std::size_t n,
                    std::uint64_t off) {
  const Fd fd(path, O_RDONLY | (direct ? O_DIRECT : 0));
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd.get(), dst + done, n - done, static_cast<off_t>(off + done));
    if (got < 0) {
      throw std::system_error(errno, std::generic_category(), "pread " + path.string());
    }
    if (got == 0) {
      throw std::runtime_error("short read of " + path.string());
    }
    done += static_cast<std::size_t>(got);
  }
}

void write_reference_file(const std::filesystem::path &path, const std::byte *src, std::size_t n) {
  const Fd fd(path, O_WRONLY | O_CREAT | O_TRUNC);
  if (::pwrite(fd.get(), src, n, 0) != static_cast<ssize_t>(n) || ::fsync(fd.get()) != 0) {
    throw std::system_error(errno, std::generic_category(), "write " + path.string());
  }
}

class Checker {
 public:
  // Read once, before any thread exists.
  // NOLINTNEXTLINE(concurrency-mt-unsafe)
  explicit Checker(std::string name) : name_(std::move(name)), report_(std::getenv("PHX_REPORT")) {}

  // Compares and, when equal, asks the host to compare the BAR range too.
  void compare(std::string_view step, const std::byte *device, const std::byte *expected,
               std::size_t n, const std::string &evidence_json) {
    if (std::memcmp(device, expected, n) != 0) {
      std::size_t first = 0;
      while (device[first] == expected[first]) {
        ++first;
      }
      std::fprintf(stderr, "%s %.*s: device memory differs from the reference at +%zu of %zu\n",
                   name_.c_str(), static_cast<int>(step.size()), step.data(), first, n);
      ok_ = false;
      return;
    }
    if (report_ != nullptr) {
      if (FILE *out = std::fopen(report_, "a")) {
        std::fprintf(out, "PHX-EVIDENCE %s\n", evidence_json.c_str());
        std::fclose(out);
      }
    }
  }

  void rate(std::string_view op, std::size_t bytes, double seconds) const {
    std::printf("{\"test\":\"%s\",\"op\":\"%.*s\",\"bytes\":%zu,\"seconds\":%.6f,\"MBps\":%.1f}\n",
                name_.c_str(), static_cast<int>(op.size()), op.data(), bytes, seconds,
                static_cast<double>(bytes) / seconds / 1e6);
  }

  [[nodiscard]] bool ok() const noexcept { return ok_; }
  [[nodiscard]] const std::string &name() const noexcept { return name_; }

 private:
  std::string name_;
  const char *report_;
  bool ok_ = true;
};

template <typename F>
double timed(F &&f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string disk_evidence(const std::string &test, std::uint64_t bar_off, std::uint64_t disk_off,
                          std::size_t n) {
  return R"({"kind":"shm_eq_disk","test":")" + test + R"(","shm":)" + std::to_string(kDevice) +
         R"(,"shm_off":)" + std::to_string(bar_off) + R"(,"disk_off":)" + std::to_string(disk_off) +
         R"(,"len":)" + std::to_string(n) + "}";
}

std::string file_evidence(const std::string &test, std::uint64_t bar_off, const std::string &path,
                          std::size_t n) {
  return R"({"kind":"shm_eq_file","test":")" + test + R"(","shm":)" + std::to_string(kDevice) +
         R"(,"shm_off":)" + std::to_string(bar_off) + R"(,"path":")" + path +
         R"(","file_off":0,"len":)" + std::to_string(n) + "}";
}

int run_block(char **argv) {
  Checker check(argv[0]);
  const std::filesystem::path remote_dev = argv[1];
  const std::filesystem::path local_dev = argv[2];
  const std::uint64_t bar_off = parse_u64("BAR_OFF", argv[3]);
  const std::uint64_t read_off = parse_u64("READ_OFF", argv[4]);
  const std::uint64_t write_off = parse_u64("WRITE_OFF", argv[5]);
  const std::size_t len = parse_u64("LEN", argv[6]);

  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  auto reg = dev.register_memory(dev_addr(bar_off), 2 * len);
  phx::File remote(remote_dev, O_RDWR, 0, phx::DirectIo::required);
  auto ref = aligned_buffer(len);

  std::size_t got = 0;
  check.rate("read", len, timed([&] { got = remote.read(reg, 0, len, read_off); }));
  if (got != len) {
    std::fprintf(stderr, "%s: read %zu of %zu bytes\n", check.name().c_str(), got, len);
    return 1;
  }
  read_reference(local_dev, true, ref.get(), len, read_off);
  check.compare("read", reg.host_view(), ref.get(), len,
                disk_evidence(check.name() + "/read", bar_off, read_off, len));

  fill_pattern(ref.get(), len, write_off ^ 0x5048585245ULL);
  std::memcpy(reg.host_view() + len, ref.get(), len);
  check.rate("write", len, timed([&] {
               got = remote.write(reg, len, len, write_off);
               remote.sync();
             }));
  if (got != len) {
    std::fprintf(stderr, "%s: wrote %zu of %zu bytes\n", check.name().c_str(), got, len);
    return 1;
  }
  auto back = aligned_buffer(len);
  read_reference(local_dev, true, back.get(), len, write_off);
  check.compare("write", back.get(), ref.get(), len,
                disk_evidence(check.name() + "/write", bar_off + len, write_off, len));
  return check.ok() ? 0 : 1;
}

int run_file(char **argv) {
  Checker check(argv[0]);
  const std::filesystem::path mount = argv[1];
  const std::filesystem::path export_dir = argv[2];
  const std::string ext4_rel = argv[3];
  const std::uint64_t bar_off = parse_u64("BAR_OFF", argv[4]);
  const std::size_t len = parse_u64("LEN", argv[5]);
  const std::string read_name = check.name() + "-read.bin";
  const std::string write_name = check.name() + "-write.bin";

  auto dev = phx::Device::open(kDevice, phx::Engine::direct);
  auto reg = dev.register_memory(dev_addr(bar_off), 2 * len);
  auto ref = aligned_buffer(len);

  // The server's file, written on the server's side.
  fill_pattern(ref.get(), len, 0x4e4653ULL + len);
  write_reference_file(export_dir / read_name, ref.get(), len);
  {
    phx::File f(mount / read_name, O_RDONLY, 0, phx::DirectIo::required);
    std::size_t got = 0;
    check.rate("read", len, timed([&] { got = f.read(reg, 0, len, 0); }));
    if (got != len) {
      std::fprintf(stderr, "%s: read %zu of %zu bytes\n", check.name().c_str(), got, len);
      return 1;
    }
  }
  check.compare("read", reg.host_view(), ref.get(), len,
                file_evidence(check.name() + "/read", bar_off, ext4_rel + "/" + read_name, len));

  fill_pattern(ref.get(), len, 0x4e4653ULL * 3 + len);
  std::memcpy(reg.host_view() + len, ref.get(), len);
  {
    phx::File f(mount / write_name, O_RDWR | O_CREAT | O_TRUNC, 0644, phx::DirectIo::required);
    std::size_t got = 0;
    check.rate("write", len, timed([&] {
                 got = f.write(reg, len, len, 0);
                 f.sync();
               }));
    if (got != len) {
      std::fprintf(stderr, "%s: wrote %zu of %zu bytes\n", check.name().c_str(), got, len);
      return 1;
    }
  }
  // The server's view of what the client wrote.
  auto back = aligned_buffer(len);
  read_reference(export_dir / write_name, false, back.get(), len, 0);
  check.compare(
      "write", back.get(), ref.get(), len,
      file_evidence(check.name() + "/write", bar_off + len, ext4_rel + "/" + write_name, len));
  return check.ok() ? 0 : 1;
}

int usage() {
  std::fputs(
      "usage: phx-remote-test block NAME REMOTE_DEV LOCAL_DEV BAR_OFF READ_OFF WRITE_OFF LEN\n"
      "       phx-remote-test file NAME MOUNT_DIR EXPORT_DIR EXT4_REL BAR_OFF LEN\n",
      stderr);
  return 2;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    const std::string_view mode = argc > 1 ? argv[1] : "";
    if (mode == "block" && argc == 9) {
      return run_block(argv + 2);
    }
    if (mode == "file" && argc == 8) {
      return run_file(argv + 2);
    }
    return usage();
  } catch (const std::invalid_argument &e) {
    std::fprintf(stderr, "phx-remote-test: %s\n", e.what());
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "phx-remote-test: %s\n", e.what());
    return 1;
  }
}
