// SPDX-License-Identifier: MIT
#include "crash_writer.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "test_support.hpp"

namespace phx::test::crash {
namespace {

// A report is one 8-byte request index (one write(): pipes keep it whole).
// kFailed is followed by the child's error message up to end of file.
constexpr std::uint64_t kFailed = ~std::uint64_t{0};

void send(int fd, std::uint64_t record) {
  // A failed report cannot be reported; the parent then misses one index,
  // which can only make the check stricter (fewer requests claimed done).
  [[maybe_unused]] const ssize_t n = ::write(fd, &record, sizeof(record));
}

[[noreturn]] void fail(int fd, const std::string &why) {
  send(fd, kFailed);
  [[maybe_unused]] const ssize_t n = ::write(fd, why.data(), why.size());
  ::_exit(3);
}

std::byte *slot_memory(const Source &src, const Plan &plan, std::size_t slot) {
  return src.registration.host_view() + slot * plan.request_size;
}

void fill_request(const Source &src, const Plan &plan, std::size_t slot, std::uint64_t index) {
  fill_pattern({slot_memory(src, plan, slot), plan.request_size}, plan.seed,
               index * plan.request_size);
}

// One request at a time: File::write returns only when the kernel took all of it.
void write_one_at_a_time(const Plan &plan, File &file, const Source &src, int report) {
  for (std::uint64_t i = 0; i < plan.requests; ++i) {
    fill_request(src, plan, 0, i);
    const std::size_t n = file.write(src.registration, 0, plan.request_size, i * plan.request_size);
    if (n != plan.request_size) {
      fail(report, "request " + std::to_string(i) + ": wrote " + std::to_string(n));
    }
    send(report, i);
  }
}

// Up to plan.depth requests in an IoQueue; each completion is reported
// before any new request is submitted, so at most depth requests are ever
// started and not reported.
void write_queued(const Plan &plan, File &file, const Source &src, int report) {
  IoQueue queue(plan.depth);
  std::vector<std::size_t> free_slots(plan.depth);
  for (std::size_t s = 0; s < plan.depth; ++s) {
    free_slots[s] = plan.depth - 1 - s;
  }
  std::vector<std::size_t> slot_of(plan.requests);
  std::uint64_t next = 0;
  while (next < plan.requests || queue.outstanding() > 0) {
    std::vector<IoRequest> batch;
    while (next < plan.requests && !free_slots.empty()) {
      const std::size_t slot = free_slots.back();
      free_slots.pop_back();
      slot_of[next] = slot;
      fill_request(src, plan, slot, next);
      batch.push_back(IoRequest::write(file, src.registration, slot * plan.request_size,
                                       plan.request_size, next * plan.request_size, next));
      ++next;
    }
    queue.submit(batch);
    for (const IoCompletion &c : queue.wait(1)) {
      if (c.error != 0 || c.bytes != plan.request_size) {
        fail(report, "request " + std::to_string(c.user_data) + ": " +
                         std::error_code(c.error, std::system_category()).message() + " after " +
                         std::to_string(c.bytes) + " bytes");
      }
      send(report, c.user_data);
      free_slots.push_back(slot_of[c.user_data]);
    }
  }
}

[[noreturn]] void writer(const Plan &plan, const std::filesystem::path &path,
                         const SourceFactory &make_source, int report) {
  try {
    const Source src = make_source(plan);
    if (src.registration.size() < plan.depth * plan.request_size) {
      fail(report, "source registration too small");
    }
    File file(path, O_RDWR | O_CREAT | O_TRUNC, 0644, plan.direct);
    if (plan.depth <= 1) {
      write_one_at_a_time(plan, file, src, report);
    } else {
      write_queued(plan, file, src, report);
    }
  } catch (const std::exception &e) {
    fail(report, e.what());
  }
  ::_exit(0);
}

bool read_record(int fd, std::uint64_t &record) {
  std::size_t got = 0;
  auto *bytes = reinterpret_cast<unsigned char *>(&record);
  while (got < sizeof(record)) {
    const ssize_t n = ::read(fd, bytes + got, sizeof(record) - got);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    got += static_cast<std::size_t>(n);
  }
  return true;
}

std::string read_rest(int fd) {
  std::string text;
  char buf[512];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) {
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

// The whole file with plain read(2): the sanitizer builds are unoptimised,
// and stream iterators cost seconds per file there.
std::vector<std::byte> read_file(const std::filesystem::path &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw std::system_error(errno, std::system_category(), "open " + path.string());
  }
  std::vector<std::byte> data(std::filesystem::file_size(path));
  std::size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::read(fd, data.data() + got, data.size() - got);
    if (n <= 0) {
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  data.resize(got);
  return data;
}

// Offset of the first byte where @p data and @p want differ in [from, to).
std::optional<std::size_t> first_difference(const std::vector<std::byte> &data,
                                            const std::vector<std::byte> &want, std::size_t from,
                                            std::size_t to) {
  if (std::memcmp(data.data() + from, want.data() + from, to - from) == 0) {
    return std::nullopt;
  }
  for (std::size_t i = from; i < to; ++i) {
    if (data[i] != want[i]) {
      return i;
    }
  }
  return std::nullopt;
}

// Offset of the first byte that is neither @p want's nor zero.
std::optional<std::size_t> first_foreign_byte(const std::vector<std::byte> &data,
                                              const std::vector<std::byte> &want) {
  constexpr std::size_t kBlock = 4096;
  for (std::size_t base = 0; base < data.size(); base += kBlock) {
    const std::size_t n = std::min(kBlock, data.size() - base);
    if (std::memcmp(data.data() + base, want.data() + base, n) == 0) {
      continue;
    }
    for (std::size_t i = base; i < base + n; ++i) {
      if (data[i] != want[i] && data[i] != std::byte{0}) {
        return i;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

Outcome run_and_kill(const Plan &plan, const std::filesystem::path &path,
                     const SourceFactory &make_source) {
  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::system_category(), "pipe2");
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw std::system_error(errno, std::system_category(), "fork");
  }
  if (pid == 0) {
    ::close(fds[0]);
    writer(plan, path, make_source, fds[1]);
  }
  ::close(fds[1]);
  Outcome out;
  std::uint64_t record = 0;
  bool sent_kill = false;
  while (read_record(fds[0], record)) {
    if (record == kFailed) {
      out.child_error = read_rest(fds[0]);
      break;
    }
    out.reported.push_back(record);
    if (!sent_kill && out.reported.size() >= plan.kill_after) {
      ::kill(pid, SIGKILL);
      sent_kill = true;
      // Keep reading: reports written before the kill are still in the pipe.
    }
  }
  ::close(fds[0]);
  if (!sent_kill) {
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.killed =
      WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && out.child_error.empty() && sent_kill;
  out.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string check_file(const Plan &plan, const std::filesystem::path &path,
                       const std::vector<std::uint64_t> &reported) {
  const std::vector<std::byte> data = read_file(path);
  std::vector<std::byte> want(data.size());
  fill_pattern(want, plan.seed, 0);
  const std::size_t r = plan.request_size;
  const std::set<std::uint64_t> done(reported.begin(), reported.end());
  std::ostringstream why;
  const auto byte_at = [&](std::size_t off) {
    return std::to_string(std::to_integer<int>(data[off])) + " (expected " +
           std::to_string(std::to_integer<int>(want[off])) + ")";
  };
  if (done.size() != reported.size()) {
    why << "a request was reported twice; ";
  }
  // 1. Every request reported done is whole.
  for (const std::uint64_t i : done) {
    if (i >= plan.requests) {
      why << "report of request " << i << " that was never issued; ";
      continue;
    }
    if (data.size() < (i + 1) * r) {
      why << "request " << i << " reported done but the file ends at " << data.size() << "; ";
      continue;
    }
    if (const auto off = first_difference(data, want, i * r, (i + 1) * r)) {
      why << "request " << i << " reported done but byte " << *off << " is " << byte_at(*off)
          << "; ";
    }
  }
  // 2. Nothing but the pattern or never-written zeros.
  if (const auto off = first_foreign_byte(data, want)) {
    why << "byte " << *off << " (request " << *off / r << ") is " << byte_at(*off)
        << ": neither the request's byte nor unwritten; ";
  }
  // 3. Bounded by what the writer can have started.
  const std::size_t window = std::max<std::size_t>(plan.depth, 1);
  if (data.size() > (reported.size() + window) * r) {
    why << "file has " << data.size() << " bytes, but with " << reported.size()
        << " requests reported and depth " << window << " at most "
        << (reported.size() + window) * r << " can have been written; ";
  }
  if (plan.depth <= 1) {
    for (std::size_t k = 0; k < reported.size(); ++k) {
      if (reported[k] != k) {
        why << "report " << k << " names request " << reported[k] << " (one at a time: in order); ";
        break;
      }
    }
    if (const auto off = first_difference(data, want, 0, data.size())) {
      why << "not a prefix of the request stream: byte " << *off << " is " << byte_at(*off) << "; ";
    }
  }
  return why.str();
}

std::size_t partial_requests(const Plan &plan, const std::filesystem::path &path) {
  const std::vector<std::byte> data = read_file(path);
  std::vector<std::byte> want(data.size());
  fill_pattern(want, plan.seed, 0);
  const std::size_t r = plan.request_size;
  std::size_t partial = 0;
  for (std::size_t base = 0; base < data.size(); base += r) {
    const std::size_t n = std::min(r, data.size() - base);
    if (n == r && std::memcmp(data.data() + base, want.data() + base, n) == 0) {
      continue;  // whole
    }
    std::size_t written = 0;
    for (std::size_t i = base; i < base + n; ++i) {
      written += data[i] == want[i] && want[i] != std::byte{0} ? 1 : 0;
    }
    const auto own_zeros = static_cast<std::size_t>(
        std::count(want.begin() + static_cast<std::ptrdiff_t>(base),
                   want.begin() + static_cast<std::ptrdiff_t>(base + n), std::byte{0}));
    // Some of its bytes, not all (the file's end may cut it too).
    partial += written > 0 && written + own_zeros < r ? 1 : 0;
  }
  return partial;
}

}  // namespace phx::test::crash
