// SPDX-License-Identifier: MIT
// phx-coldsweep: raw reads of a set of files in one shape, one JSON record
// with the block device's own counters (/proc/diskstats: requests and
// bytes), so that the shapes a cold load could take are compared by what
// the disk saw as well as by time.  No GPU: the bytes land in host memory,
// page-locked (mlock, what pinned memory is to the kernel) or plain.
//
//   phx-coldsweep --method pread --threads 16 --block 512K --order file FILES...
//
// method pread: each thread reads one block at a time, synchronously.
// method uring / uring-fixed: each thread keeps --depth blocks in flight on
// its own ring (uring-fixed: its buffers registered with the ring).
// order file: every thread takes the next block of the files in order
// (one shared cursor); ranges: the bytes cut into one contiguous range per
// thread.
#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/units.hpp"

namespace {

struct Options {
  std::vector<std::string> files;
  std::string method = "pread";
  std::string order = "file";
  std::string memory = "locked";
  unsigned threads = 16;
  unsigned depth = 1;
  std::size_t block = std::size_t{512} << 10;
  bool buffered = false;
  bool evict = false;
  std::string start = "0";  // bytes before each file's first block, or "data" (its tensors)
  bool widen = false;       // blocks of exactly --block from --start, each read widened to 4 KiB
};

[[noreturn]] void fail(const std::string &what, int err = errno) {
  throw std::system_error(err, std::generic_category(), what);
}

class Fd {
 public:
  Fd(const std::string &path, int flags) : fd_(::open(path.c_str(), flags)) {
    if (fd_ < 0) {
      fail("open " + path);
    }
  }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  Fd(Fd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd &operator=(Fd &&) = delete;
  ~Fd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// One aligned buffer, page-locked when asked.
class Buffer {
 public:
  // @p small_pages: no transparent huge pages, so that a block's pages are
  // scattered as cudaHostAlloc's tend to be (one segment each); on huge
  // pages neighbouring blocks are contiguous and the block layer merges them.
  Buffer(std::size_t size, bool locked, bool small_pages) : size_(size) {
    void *p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      fail("mmap");
    }
    data_ = static_cast<std::byte *>(p);
    if (small_pages) {
      (void)::madvise(data_, size, MADV_NOHUGEPAGE);
    }
    std::memset(data_, 0, size);
    if (locked && ::mlock(data_, size) != 0) {
      const int err = errno;
      ::munmap(data_, size);
      fail("mlock", err);
    }
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  Buffer(Buffer &&other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(other.size_) {}
  Buffer &operator=(Buffer &&) = delete;
  ~Buffer() {
    if (data_ != nullptr) {
      ::munmap(data_, size_);
    }
  }
  [[nodiscard]] std::byte *data() const noexcept { return data_; }

 private:
  std::byte *data_;
  std::size_t size_;
};

// The whole disk behind @p path (a partition's parent), by name.
std::string disk_of(const std::string &path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    fail("stat " + path);
  }
  const std::string sys =
      "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  std::error_code ec;
  std::filesystem::path real = std::filesystem::canonical(sys, ec);
  if (ec) {
    return {};
  }
  if (std::filesystem::exists(real / "partition")) {
    real = real.parent_path();
  }
  return real.filename().string();
}

struct DiskCounters {
  std::uint64_t reads = 0;    // completed read requests
  std::uint64_t merged = 0;   // reads merged before they reached the device
  std::uint64_t sectors = 0;  // 512-byte sectors read
};

DiskCounters disk_counters(const std::string &disk) {
  std::ifstream in("/proc/diskstats");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    unsigned maj = 0;
    unsigned min = 0;
    std::string name;
    DiskCounters c;
    fields >> maj >> min >> name >> c.reads >> c.merged >> c.sectors;
    if (name == disk) {
      return c;
    }
  }
  return {};
}

// Drops the files from the page cache and returns the fraction still resident.
double evict(const std::vector<std::string> &files) {
  std::uint64_t resident = 0;
  std::uint64_t total = 0;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (const std::string &f : files) {
    const Fd fd(f, O_RDONLY);
    ::fdatasync(fd.get());
    (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
    struct stat st {};
    ::fstat(fd.get(), &st);
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size == 0) {
      continue;
    }
    void *map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (map == MAP_FAILED) {
      fail("mmap " + f);
    }
    std::vector<unsigned char> vec((size + page - 1) / page);
    if (::mincore(map, size, vec.data()) != 0) {
      const int err = errno;
      ::munmap(map, size);
      fail("mincore " + f, err);
    }
    ::munmap(map, size);
    resident += static_cast<std::uint64_t>(
        std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return (v & 1U) != 0; }));
    total += vec.size();
  }
  return total == 0 ? 0.0 : static_cast<double>(resident) / static_cast<double>(total);
}

// Where a safetensors file's tensor bytes begin: after its 8-byte
// little-endian header length and the header.
std::uint64_t data_offset(const std::string &path) {
  const Fd fd(path, O_RDONLY);
  unsigned char le[8] = {};
  if (::pread(fd.get(), le, sizeof(le), 0) != static_cast<ssize_t>(sizeof(le))) {
    fail("--start data: " + path + " has no safetensors header", EINVAL);
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) {
    n = (n << 8U) | le[i];
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    fail("stat " + path);
  }
  if (n > static_cast<std::uint64_t>(st.st_size) - sizeof(le)) {
    fail("--start data: " + path + ": its header length " + std::to_string(n) +
             " runs past the end of the file",
         EINVAL);
  }
  return n + sizeof(le);
}

struct Block {
  int fd;
  std::uint64_t offset;
  std::size_t size;     // bytes the file has there
  std::size_t request;  // size rounded up to 4 KiB (O_DIRECT lengths)
};

// The blocks of every file in order, and for --order ranges the first block
// of each thread's range.  Without --widen the blocks start at --start
// rounded down to 4 KiB (every read aligned, as O_DIRECT wants); with it
// they start at --start exactly and each read covers its block's 4 KiB
// pages, so that neighbouring reads share a page where --start is not
// aligned.
struct Work {
  std::vector<Block> blocks;
  std::vector<std::size_t> range_begin;  // threads + 1 entries
};

Work cut(const std::vector<Fd> &fds, const std::vector<std::uint64_t> &sizes,
         const std::vector<std::uint64_t> &starts, const Options &o) {
  Work w;
  constexpr std::uint64_t kPage = 4096;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    const std::uint64_t first = o.widen ? starts[i] : starts[i] / kPage * kPage;
    for (std::uint64_t off = first; off < sizes[i]; off += o.block) {
      const std::uint64_t begin = off / kPage * kPage;
      const std::uint64_t end = std::min<std::uint64_t>(off + o.block, sizes[i]);
      const auto size = static_cast<std::size_t>(end - begin);
      w.blocks.push_back({fds[i].get(), begin, size, (size + kPage - 1) / kPage * kPage});
    }
  }
  for (unsigned t = 0; t <= o.threads; ++t) {
    w.range_begin.push_back(w.blocks.size() * t / o.threads);
  }
  return w;
}

// Hands out block indices: from one shared cursor, or from the thread's range.
class Cursor {
 public:
  Cursor(const Work &work, const Options &o, std::atomic<std::size_t> &shared, unsigned thread)
      : shared_(o.order == "file" ? &shared : nullptr),
        next_(work.range_begin[thread]),
        end_(shared_ != nullptr ? work.blocks.size() : work.range_begin[thread + 1]) {}
  [[nodiscard]] bool take(std::size_t &index) {
    index = shared_ != nullptr ? shared_->fetch_add(1) : next_++;
    return index < end_;
  }

 private:
  std::atomic<std::size_t> *shared_;
  std::size_t next_;
  std::size_t end_;
};

void check_read(ssize_t got, const Block &b) {
  if (got < 0) {
    fail("read", static_cast<int>(-got));
  }
  // O_DIRECT reads of a file's unaligned tail return the bytes that exist.
  if (static_cast<std::size_t>(got) < b.size) {
    fail("short read at " + std::to_string(b.offset), EIO);
  }
}

void pread_thread(const Work &work, Cursor cursor, const Buffer &buf) {
  std::size_t i = 0;
  while (cursor.take(i)) {
    const Block &b = work.blocks[i];
    std::size_t done = 0;
    while (done < b.size) {
      const ssize_t n =
          ::pread(b.fd, buf.data() + done, b.request - done, static_cast<off_t>(b.offset + done));
      if (n < 0) {
        fail("pread");
      }
      if (n == 0) {
        fail("short read at " + std::to_string(b.offset), EIO);
      }
      done += static_cast<std::size_t>(n);
    }
  }
}

void uring_thread(const Work &work, Cursor cursor, const std::vector<Buffer> &bufs,
                  std::size_t block, bool fixed) {
  io_uring ring{};
  const auto depth = static_cast<unsigned>(bufs.size());
  if (const int r = io_uring_queue_init(depth, &ring, 0); r < 0) {
    fail("io_uring_queue_init", -r);
  }
  const std::unique_ptr<io_uring, void (*)(io_uring *)> guard(&ring, io_uring_queue_exit);
  if (fixed) {
    std::vector<iovec> iov;
    iov.reserve(bufs.size());
    for (const Buffer &b : bufs) {
      iov.push_back({b.data(), block});
    }
    if (const int r = io_uring_register_buffers(&ring, iov.data(), depth); r < 0) {
      fail("io_uring_register_buffers", -r);
    }
  }
  std::vector<unsigned> free_slots;
  free_slots.reserve(depth);
  for (unsigned s = 0; s < depth; ++s) {
    free_slots.push_back(s);
  }
  std::vector<std::size_t> slot_block(depth);
  unsigned inflight = 0;
  bool more = true;
  for (;;) {
    while (more && !free_slots.empty()) {
      std::size_t i = 0;
      if (!cursor.take(i)) {
        more = false;
        break;
      }
      const unsigned s = free_slots.back();
      free_slots.pop_back();
      slot_block[s] = i;
      const Block &b = work.blocks[i];
      io_uring_sqe *sqe = io_uring_get_sqe(&ring);
      if (fixed) {
        io_uring_prep_read_fixed(sqe, b.fd, bufs[s].data(), static_cast<unsigned>(b.request),
                                 b.offset, static_cast<int>(s));
      } else {
        io_uring_prep_read(sqe, b.fd, bufs[s].data(), static_cast<unsigned>(b.request), b.offset);
      }
      io_uring_sqe_set_data64(sqe, s);
      ++inflight;
    }
    if (inflight == 0) {
      return;
    }
    io_uring_cqe *cqe = nullptr;
    if (const int r = io_uring_submit_and_wait(&ring, 1); r < 0) {
      fail("io_uring_submit_and_wait", -r);
    }
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      const auto s = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
      check_read(cqe->res, work.blocks[slot_block[s]]);
      free_slots.push_back(s);
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
    inflight -= seen;
  }
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const auto s = [](const timeval &tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

int run(const Options &o) {
  const bool uring = o.method != "pread";
  const int flags = O_RDONLY | (o.buffered ? 0 : O_DIRECT);
  double resident = -1;
  if (o.evict) {
    resident = evict(o.files);
  }
  std::vector<Fd> fds;
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0;
  for (const std::string &f : o.files) {
    fds.emplace_back(f, flags);
    struct stat st {};
    ::fstat(fds.back().get(), &st);
    sizes.push_back(static_cast<std::uint64_t>(st.st_size));
    total += sizes.back();
  }
  std::vector<std::uint64_t> starts;
  for (std::size_t i = 0; i < o.files.size(); ++i) {
    starts.push_back(o.start == "data" ? data_offset(o.files[i])
                                       : static_cast<std::uint64_t>(phxtools::parse_size(o.start)));
  }
  const Work work = cut(fds, sizes, starts, o);
  if (work.blocks.empty()) {
    fail("nothing to read after --start " + o.start, EINVAL);
  }
  total = 0;  // the bytes from each file's first block on: what a loader would count
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    total += sizes[i] - std::min(sizes[i], o.widen ? starts[i] : starts[i] / 4096 * 4096);
  }
  std::uint64_t requested = 0;  // what the reads ask for: widened reads overlap
  for (const Block &b : work.blocks) {
    requested += b.request;
  }
  const unsigned per_thread = uring ? o.depth : 1;
  std::vector<std::vector<Buffer>> buffers(o.threads);
  const std::size_t buffer_size = o.block + (o.widen ? 4096 : 0);
  for (auto &b : buffers) {
    for (unsigned i = 0; i < per_thread; ++i) {
      b.emplace_back(buffer_size, o.memory != "plain", o.memory == "locked-4k");
    }
  }
  const std::string disk = disk_of(o.files.front());
  const double cpu0 = cpu_seconds();
  const DiskCounters d0 = disk_counters(disk);
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<std::size_t> shared{0};
  std::mutex failure_mutex;
  std::string failure;
  {
    std::vector<std::jthread> threads;
    threads.reserve(o.threads);
    for (unsigned t = 0; t < o.threads; ++t) {
      threads.emplace_back([&, t] {
        try {
          const Cursor cursor(work, o, shared, t);
          if (uring) {
            uring_thread(work, cursor, buffers[t], buffer_size, o.method == "uring-fixed");
          } else {
            pread_thread(work, cursor, buffers[t].front());
          }
        } catch (const std::exception &e) {
          const std::lock_guard lock(failure_mutex);
          failure = e.what();
        }
      });
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const DiskCounters d1 = disk_counters(disk);
  const double cpu = cpu_seconds() - cpu0;
  const std::uint64_t requests = d1.reads - d0.reads;
  const std::uint64_t disk_bytes = (d1.sectors - d0.sectors) * 512;
  std::printf(
      "{\"kind\": \"sweep\", \"method\": \"%s\", \"threads\": %u, \"depth\": %u, \"block\": %zu, "
      "\"start\": \"%s\", \"widen\": %s, \"order\": \"%s\", \"memory\": \"%s\", \"direct\": %s, "
      "\"files\": %zu, \"bytes\": %llu, "
      "\"requested_bytes\": %llu, \"reads\": %zu, "
      "\"seconds\": %.4f, \"gbps\": %.3f, \"cpu_seconds\": %.3f, \"cpu_s_per_gb\": %.3f, "
      "\"resident_before\": %.4f, \"disk\": \"%s\", \"disk_requests\": %llu, "
      "\"disk_merged\": %llu, \"disk_bytes\": %llu, \"disk_request_bytes\": %.0f, "
      "\"status\": \"%s\", \"error\": \"%s\"}\n",
      o.method.c_str(), o.threads, per_thread, o.block, o.start.c_str(), o.widen ? "true" : "false",
      o.order.c_str(), o.memory.c_str(), o.buffered ? "false" : "true", o.files.size(),
      static_cast<unsigned long long>(total), static_cast<unsigned long long>(requested),
      work.blocks.size(), seconds, static_cast<double>(total) / seconds / 1e9, cpu,
      cpu / (static_cast<double>(total) / 1e9), resident, disk.c_str(),
      static_cast<unsigned long long>(requests),
      static_cast<unsigned long long>(d1.merged - d0.merged),
      static_cast<unsigned long long>(disk_bytes),
      requests == 0 ? 0.0 : static_cast<double>(disk_bytes) / static_cast<double>(requests),
      failure.empty() ? "ok" : "error", failure.c_str());
  return failure.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
  CLI::App app{"raw reads of files in one shape, with the disk's request counters"};
  Options o;
  std::string block = "512K";
  app.add_option("files", o.files, "files to read, in this order")->required();
  app.add_option("--method", o.method, "pread, uring or uring-fixed")
      ->check(CLI::IsMember({"pread", "uring", "uring-fixed"}));
  app.add_option("--threads", o.threads, "reader threads")->check(CLI::Range(1U, 1024U));
  app.add_option("--depth", o.depth, "io_uring: blocks in flight per thread")
      ->check(CLI::Range(1U, 4096U));
  app.add_option("--block", block, "bytes per read (K, M suffixes)");
  app.add_option("--order", o.order,
                 "file: one shared cursor in file order; ranges: one "
                 "contiguous range per thread")
      ->check(CLI::IsMember({"file", "ranges"}));
  app.add_option("--memory", o.memory,
                 "locked (mlock, as pinned), locked-4k (no huge pages) or plain")
      ->check(CLI::IsMember({"locked", "locked-4k", "plain"}));
  app.add_flag("--buffered", o.buffered, "through the page cache (default O_DIRECT)");
  app.add_flag("--evict", o.evict,
               "drop the files from the page cache first; "
               "resident_before says what stayed");
  app.add_option("--start", o.start,
                 "bytes of each file before its first block (a header; K, M suffixes), or "
                 "'data': each file's safetensors data offset; rounded down to 4 KiB unless "
                 "--widen");
  app.add_flag("--widen", o.widen,
               "blocks of exactly --block from --start, each read widened to its "
               "4 KiB pages (neighbours share a page where --start is unaligned)");
  CLI11_PARSE(app, argc, argv);
  try {
    o.block = static_cast<std::size_t>(phxtools::parse_size(block));
    if (o.block == 0 || o.block % 4096 != 0) {
      throw std::invalid_argument("--block must be a positive multiple of 4 KiB");
    }
    return run(o);
  } catch (const std::exception &e) {
    std::cerr << "phx-coldsweep: " << e.what() << "\n";
    return 1;
  }
}
