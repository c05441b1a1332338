// SPDX-License-Identifier: MIT
// host_example: the paper's flow with the C++ API, on host memory so that it
// runs on any machine: open device 0 with the host engine, register a
// buffer, read a file into it with one synchronous call and again with an
// io_uring batch.
//
//   host_example [FILE]     (without FILE, a 4 MiB file is made and removed)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "phoenix/phoenix.hpp"

namespace {

constexpr std::size_t kDefaultSize = std::size_t{4} << 20;
constexpr std::size_t kRequestSize = std::size_t{256} << 10;

struct FreeDeleter {
  void operator()(std::byte *p) const noexcept { std::free(p); }
};
using AlignedBytes = std::unique_ptr<std::byte, FreeDeleter>;

// O_DIRECT wants aligned memory; 4 KiB covers every logical block size.
AlignedBytes allocate(std::size_t size) {
  const std::size_t rounded = (std::max<std::size_t>(size, 1) + 4095) / 4096 * 4096;
  AlignedBytes p(static_cast<std::byte *>(std::aligned_alloc(4096, rounded)));
  if (!p) {
    throw std::system_error(ENOMEM, std::generic_category(), "aligned_alloc");
  }
  return p;
}

std::filesystem::path make_sample_file(std::size_t size) {
  std::string name = "/var/tmp/phx-host-example.XXXXXX";
  const int fd = ::mkstemp(name.data());
  if (fd < 0) {
    const int err = errno;
    throw std::system_error(err, std::generic_category(), "mkstemp " + name);
  }
  ::close(fd);
  std::vector<std::byte> data(size);
  for (std::size_t i = 0; i < size; ++i) {
    data[i] = static_cast<std::byte>(i * 131 % 251);
  }
  phx::File file(name, O_WRONLY);
  file.write(data, 0);
  return name;
}

int run(const std::filesystem::path &path) {
  phx::Device dev = phx::Device::open(0, phx::Engine::host);
  std::cout << "engine: " << phx::to_string(dev.engine()) << " (" << dev.engine_reason() << ")\n";

  phx::File file(path, O_RDONLY);  // O_DIRECT when the filesystem has it
  const auto size = static_cast<std::size_t>(file.size());
  const AlignedBytes memory = allocate(size);
  const phx::Registration reg = dev.register_memory(memory.get(), std::max<std::size_t>(size, 1));

  // One call for the whole file: the library splits it and stages any
  // unaligned tail.
  const std::size_t n = file.read(reg, 0, size, 0);
  std::cout << "read " << n << " bytes from " << path << (file.direct_io() ? " with" : " without")
            << " O_DIRECT\n";

  // The same bytes again as a batch of requests through io_uring.
  const std::vector<std::byte> first(reg.host_view(), reg.host_view() + n);
  std::fill_n(reg.host_view(), n, std::byte{0});
  std::vector<phx::IoRequest> batch;
  for (std::size_t offset = 0; offset < size; offset += kRequestSize) {
    const std::size_t len = std::min(kRequestSize, size - offset);
    batch.push_back(phx::IoRequest::read(file, reg, offset, len, offset, offset));
  }
  phx::IoQueue queue(16);
  for (const phx::IoCompletion &c : queue.run(batch)) {
    if (c.error != 0) {
      throw std::system_error(c.error, std::generic_category(),
                              "batch request at offset " + std::to_string(c.user_data));
    }
  }
  const bool same = std::equal(first.begin(), first.end(), reg.host_view());
  std::cout << "io_uring batch of " << batch.size()
            << " requests: " << (same ? "same bytes" : "DIFFERENT bytes") << "\n";
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    if (argc > 1) {
      return run(argv[1]);
    }
    const std::filesystem::path sample = make_sample_file(kDefaultSize);
    int status = 1;
    try {
      status = run(sample);
    } catch (...) {
      std::filesystem::remove(sample);
      throw;
    }
    std::filesystem::remove(sample);
    return status;
  } catch (const phx::IoError &e) {
    std::cerr << "host_example: " << e.what() << " (" << e.bytes_done() << " bytes done)\n";
  } catch (const std::exception &e) {
    std::cerr << "host_example: " << e.what() << "\n";
  }
  return 1;
}
