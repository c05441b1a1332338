// SPDX-License-Identifier: MIT
// An application built against an installed libphoenix, through
// find_package(phoenix) or pkg-config: it uses the C and the C++ API on host
// memory and checks the bytes.  Exit status 0 when everything matched.
//
//   consumer [SCRATCH_DIR]     (default /var/tmp)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"

namespace {

constexpr std::size_t kSize = 3 * 4096 + 123;  // an unaligned tail on purpose
constexpr int kDevice = 0;

int failures = 0;

void check(bool ok, const std::string &what) {
  std::cout << (ok ? "ok   " : "FAIL ") << what << "\n";
  if (!ok) {
    ++failures;
  }
}

std::byte pattern(std::size_t i) {
  return static_cast<std::byte>((i * 7 + 3) % 253);
}

// Page-aligned so that O_DIRECT takes the aligned body as it is.
struct alignas(4096) Buffer {
  std::byte bytes[kSize];
};

void cpp_api(const std::filesystem::path &path) {
  phx::Device dev = phx::Device::open(kDevice, phx::Engine::host);
  check(dev.engine() == phx::Engine::host, "C++: device 0 opened with the host engine");
  auto buffer = std::make_unique<Buffer>();
  const phx::Registration reg = dev.register_memory(buffer->bytes, kSize);
  check(reg.size() == kSize && reg.host_view() == buffer->bytes, "C++: register_memory");

  for (std::size_t i = 0; i < kSize; ++i) {
    reg.host_view()[i] = pattern(i);
  }
  phx::File file(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  check(file.write(reg, 0, kSize, 0) == kSize, "C++: File::write");
  std::fill_n(reg.host_view(), kSize, std::byte{0});
  check(file.read(reg, 0, kSize, 0) == kSize, "C++: File::read");
  bool same = true;
  for (std::size_t i = 0; i < kSize; ++i) {
    same = same && reg.host_view()[i] == pattern(i);
  }
  check(same, "C++: bytes read back match");

  std::fill_n(reg.host_view(), kSize, std::byte{0});
  try {
    phx::IoQueue queue(4);
    const std::vector<phx::IoRequest> requests = {
        phx::IoRequest::read(file, reg, 0, 8192, 0, 1),
        phx::IoRequest::read(file, reg, 8192, kSize - 8192, 8192, 2)};
    std::size_t bytes = 0;
    for (const phx::IoCompletion &c : queue.run(requests)) {
      check(c.error == 0, "C++: IoQueue request " + std::to_string(c.user_data));
      bytes += c.bytes;
    }
    check(bytes == kSize && reg.view()[kSize - 1] == pattern(kSize - 1), "C++: IoQueue bytes");
  } catch (const std::system_error &e) {
    // Containers may forbid io_uring; that is the machine, not the install.
    if (e.code().value() != ENOSYS && e.code().value() != EPERM) {
      throw;
    }
    std::cout << "skip C++: IoQueue (io_uring unavailable: " << e.what() << ")\n";
  }
}

void c_api(const std::filesystem::path &path) {
  check(std::strcmp(phxfs_version(), PHOENIX_VERSION_STRING) == 0,
        "C: phxfs_version() matches the installed config.h");
  if (phxfs_open_engine(kDevice, PHXFS_ENGINE_HOST) != 0) {
    check(false, std::string("C: phxfs_open_engine: ") + phxfs_last_error());
    return;
  }
  std::vector<std::byte> buffer(kSize + 64);
  // An odd address: the library stages what O_DIRECT cannot take directly.
  std::byte *memory = buffer.data() + 1;
  void *target = nullptr;
  if (phxfs_regmem(kDevice, memory, kSize, &target) != 0) {
    check(false, std::string("C: phxfs_regmem: ") + phxfs_last_error());
    (void)phxfs_close(kDevice);
    return;
  }
  check(target == memory, "C: phxfs_regmem returns the host address for the host engine");

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);  // NOLINT(*-vararg)
  if (fd < 0 && errno == EINVAL) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT(*-vararg)
  }
  check(fd >= 0, "C: open " + path.string());
  if (fd >= 0) {
    const phxfs_fileid_t fid = {fd, kDevice};
    const ssize_t n = phxfs_read(fid, memory, 0, kSize, 0);
    check(n == static_cast<ssize_t>(kSize), "C: phxfs_read returns the file size");
    bool same = true;
    for (std::size_t i = 0; i < kSize; ++i) {
      same = same && memory[i] == pattern(i);
    }
    check(same, "C: bytes read back match");
    errno = 0;
    check(phxfs_read(fid, memory, static_cast<off_t>(kSize), 1, 0) < 0 && errno == EFAULT,
          "C: phxfs_read outside the registration fails with EFAULT");
    ::close(fd);
  }
  check(phxfs_deregmem(kDevice, memory, kSize) == 0, "C: phxfs_deregmem");
  check(phxfs_close(kDevice) == 0, "C: phxfs_close");
}

}  // namespace

int main(int argc, char **argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : "/var/tmp";
  const std::filesystem::path path = dir / ("phoenix-consumer." + std::to_string(::getpid()));
  try {
    cpp_api(path);
    c_api(path);
  } catch (const std::exception &e) {
    check(false, std::string("exception: ") + e.what());
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::cout << (failures == 0 ? "consumer: all checks passed\n" : "consumer: FAILED\n");
  return failures == 0 ? 0 : 1;
}
