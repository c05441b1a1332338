// SPDX-License-Identifier: MIT
// gpu_load - how fast one file reaches GPU memory, and the ceilings.
//
//   gpu_load --file PATH [--size BYTES] [--what LIST] [--repeat N] [--sweep]
//
// Creates PATH (pattern data) if it is missing or shorter than --size, then
// measures, each as one JSON line on stdout:
//   h2d_pinned     pinned host -> device copies, 256 MiB each (PCIe ceiling)
//   read_pinned    parallel pread into pinned memory, page cache (warm ceiling)
//   read_direct    the same with O_DIRECT after drop_caches (cold ceiling)
//   compat         libphoenix's compat engine, warm (buffered) and cold (O_DIRECT)
//   naive          pread into pageable memory + cudaMemcpy, one thread, warm and cold
//   cufile         the cuFile baseline engine (or the reason it cannot run)
// --sweep adds compat runs over PHX_NTHREADS x PHX_CHUNK_SIZE x PHX_QUEUE_DEPTH.
// Every record echoes its configuration; the first describes the machine.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "phoenix/phoenix.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string file;
  std::uint64_t size = std::uint64_t{8} << 30;
  std::set<std::string> what = {"h2d_pinned", "read_pinned", "read_direct",
                                "compat",     "naive",       "cufile"};
  int repeat = 3;
  bool sweep = false;
  bool cold = true;
};

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "gpu_load: %s\n", message.c_str());
  std::exit(1);  // NOLINT(concurrency-mt-unsafe): single-threaded at this point
}

void cuda_check(cudaError_t err, const char *call) {
  if (err != cudaSuccess) {
    die(std::string(call) + ": " + cudaGetErrorString(err));
  }
}

std::string json_escape(const std::string &s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// One record: {"bench":"gpu_load","what":..., fields..., "bytes":..., "seconds":..., "gbps":...}
void emit(const std::string &what, const std::string &fields, std::uint64_t bytes, double seconds,
          const std::string &error = {}) {
  std::printf(
      "{\"bench\":\"gpu_load\",\"what\":\"%s\"%s%s,\"bytes\":%llu,\"seconds\":%.6f,"
      "\"gbps\":%.3f%s}\n",
      what.c_str(), fields.empty() ? "" : ",", fields.c_str(),
      static_cast<unsigned long long>(bytes), seconds,
      seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0,
      error.empty() ? "" : (",\"error\":\"" + json_escape(error) + "\"").c_str());
  std::fflush(stdout);
}

std::string read_first_line(const char *path, const std::string &key = {}) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (key.empty() || line.rfind(key, 0) == 0) {
      return line;
    }
  }
  return {};
}

void describe_machine(const Options &o) {
  utsname u{};
  (void)::uname(&u);
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);
  std::string cpu = read_first_line("/proc/cpuinfo", "model name");
  if (auto p = cpu.find(':'); p != std::string::npos) {
    cpu = cpu.substr(p + 2);
  }
  const std::string mem = read_first_line("/proc/meminfo", "MemTotal");
  struct stat st {};
  (void)::stat(o.file.c_str(), &st);
  std::string fs = "unknown";
  {
    std::ifstream mounts("/proc/self/mounts");
    std::string dev;
    std::string dir;
    std::string type;
    std::string rest;
    std::size_t best = 0;
    char resolved[4096] = {};
    const std::string full = ::realpath(o.file.c_str(), resolved) != nullptr ? resolved : o.file;
    while (mounts >> dev >> dir >> type && std::getline(mounts, rest)) {
      if (full.rfind(dir, 0) == 0 && dir.size() >= best) {
        best = dir.size();
        fs = type + " on " + dev;
      }
    }
  }
  std::printf(
      "{\"bench\":\"gpu_load\",\"what\":\"machine\",\"gpu\":\"%s\",\"gpu_memory\":%zu,"
      "\"cuda_driver\":%d,\"pci_bus\":\"%02x:%02x\",\"cpu\":\"%s\",\"cores\":%u,"
      "\"memtotal\":\"%s\",\"kernel\":\"%s\",\"file\":\"%s\",\"filesystem\":\"%s\","
      "\"file_bytes\":%llu,\"phoenix\":\"%s\"}\n",
      json_escape(prop.name).c_str(), prop.totalGlobalMem, driver, prop.pciBusID, prop.pciDeviceID,
      json_escape(cpu).c_str(), std::thread::hardware_concurrency(), json_escape(mem).c_str(),
      u.release, json_escape(o.file).c_str(), json_escape(fs).c_str(),
      static_cast<unsigned long long>(st.st_size), PHOENIX_VERSION_STRING);
  std::fflush(stdout);
}

bool drop_caches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.flush();
  return f.good();
}

void create_file(const Options &o) {
  struct stat st {};
  if (::stat(o.file.c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= o.size) {
    return;
  }
  const int fd = ::open(o.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    die("create " + o.file + ": " + std::strerror(errno));
  }
  std::vector<std::uint64_t> block((std::size_t{64} << 20) / 8);
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  const auto t0 = Clock::now();
  for (std::uint64_t done = 0; done < o.size;) {
    for (auto &w : block) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w = x;
    }
    const auto n =
        static_cast<std::size_t>(std::min<std::uint64_t>(block.size() * 8, o.size - done));
    if (::pwrite(fd, block.data(), n, static_cast<off_t>(done)) != static_cast<ssize_t>(n)) {
      die("write " + o.file + ": " + std::strerror(errno));
    }
    done += n;
  }
  ::fsync(fd);
  ::close(fd);
  emit("create_file", "", o.size, std::chrono::duration<double>(Clock::now() - t0).count());
}

// Parallel pread of the whole file into per-thread pinned buffers.
double read_to_pinned(const Options &o, bool direct, int threads, std::size_t chunk) {
  const int fd = ::open(o.file.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) {
    die("open " + o.file + ": " + std::strerror(errno));
  }
  std::vector<void *> buffers(static_cast<std::size_t>(threads));
  for (auto &b : buffers) {
    cuda_check(cudaMallocHost(&b, chunk), "cudaMallocHost");
  }
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> failed{false};
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (;;) {
        const std::uint64_t at = next.fetch_add(chunk);
        if (at >= o.size) {
          return;
        }
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, o.size - at));
        if (::pread(fd, buffers[static_cast<std::size_t>(t)], n, static_cast<off_t>(at)) !=
            static_cast<ssize_t>(n)) {
          failed = true;
          return;
        }
      }
    });
  }
  for (auto &th : pool) {
    th.join();
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto *b : buffers) {
    (void)cudaFreeHost(b);
  }
  ::close(fd);
  if (failed) {
    die("pread failed in read_to_pinned");
  }
  return s;
}

double h2d_pinned(const Options &o, void *device) {
  constexpr std::size_t kChunk = std::size_t{256} << 20;
  void *pinned = nullptr;
  cuda_check(cudaMallocHost(&pinned, kChunk), "cudaMallocHost");
  std::memset(pinned, 1, kChunk);
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreate(&s), "cudaStreamCreate");
  cuda_check(cudaMemcpyAsync(device, pinned, kChunk, cudaMemcpyHostToDevice, s), "warm-up");
  cuda_check(cudaStreamSynchronize(s), "sync");
  const auto t0 = Clock::now();
  for (std::uint64_t at = 0; at < o.size; at += kChunk) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, o.size - at));
    cuda_check(
        cudaMemcpyAsync(static_cast<char *>(device) + at, pinned, n, cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync");
  }
  cuda_check(cudaStreamSynchronize(s), "sync");
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  (void)cudaStreamDestroy(s);
  (void)cudaFreeHost(pinned);
  return sec;
}

double naive(const Options &o, void *device) {
  constexpr std::size_t kChunk = std::size_t{64} << 20;
  std::vector<char> buffer(kChunk);
  const int fd = ::open(o.file.c_str(), O_RDONLY | O_CLOEXEC);
  const auto t0 = Clock::now();
  for (std::uint64_t at = 0; at < o.size; at += kChunk) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, o.size - at));
    if (::pread(fd, buffer.data(), n, static_cast<off_t>(at)) != static_cast<ssize_t>(n)) {
      die("naive pread failed");
    }
    cuda_check(
        cudaMemcpy(static_cast<char *>(device) + at, buffer.data(), n, cudaMemcpyHostToDevice),
        "cudaMemcpy");
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  return s;
}

void set_env(const char *name, const std::string &value) {
  ::setenv(name, value.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): no other threads read it now
}

std::string compat_fields(const char *cache, const std::string &extra = {}) {
  auto get = [](const char *n) {
    const char *v = std::getenv(n);  // NOLINT(concurrency-mt-unsafe)
    return std::string(v != nullptr ? v : "default");
  };
  return std::string("\"cache\":\"") + cache + "\",\"PHX_NTHREADS\":\"" + get("PHX_NTHREADS") +
         "\",\"PHX_CHUNK_SIZE\":\"" + get("PHX_CHUNK_SIZE") + "\",\"PHX_QUEUE_DEPTH\":\"" +
         get("PHX_QUEUE_DEPTH") + "\"" + extra;
}

// One load of the whole file through an engine; returns seconds or nullopt
// with the error.
std::optional<double> engine_load(const Options &o, phx::Engine engine, void *device, bool direct,
                                  std::string &error) {
  try {
    auto dev = phx::Device::open(0, engine);
    auto reg = dev.register_memory(device, o.size);
    phx::File f(o.file, O_RDONLY, 0644, direct ? phx::DirectIo::required : phx::DirectIo::off);
    (void)f.read(reg, 0, 4096, 0);  // start the copy threads outside the timing
    const auto t0 = Clock::now();
    const std::size_t n = f.read(reg, 0, o.size, 0);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (n != o.size) {
      error = "short read: " + std::to_string(n);
      return std::nullopt;
    }
    return s;
  } catch (const std::exception &e) {
    error = e.what();
    return std::nullopt;
  }
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        die("missing value for " + a);
      }
      return argv[++i];
    };
    if (a == "--file") {
      o.file = value();
    } else if (a == "--size") {
      o.size = std::strtoull(value().c_str(), nullptr, 0);
    } else if (a == "--repeat") {
      o.repeat = std::atoi(value().c_str());
    } else if (a == "--what") {
      o.what.clear();
      std::stringstream ss(value());
      std::string item;
      while (std::getline(ss, item, ',')) {
        o.what.insert(item);
      }
    } else if (a == "--sweep") {
      o.sweep = true;
    } else if (a == "--no-cold") {
      o.cold = false;
    } else {
      die("unknown argument " + a + " (see the comment at the top of bench/gpu_load/main.cpp)");
    }
  }
  if (o.file.empty() || o.size == 0 || o.repeat < 1) {
    die("usage: gpu_load --file PATH [--size BYTES] [--what LIST] [--repeat N] [--sweep]");
  }
  return o;
}

}  // namespace

int main(int argc, char **argv) {
  const Options o = parse(argc, argv);
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    die("no CUDA GPU");
  }
  create_file(o);
  describe_machine(o);
  void *device = nullptr;
  cuda_check(cudaMalloc(&device, o.size), "cudaMalloc");
  const bool can_drop = drop_caches();
  if (!can_drop) {
    emit("drop_caches", "", 0, 0, "cannot write /proc/sys/vm/drop_caches: cold runs skipped");
  }
  std::vector<char> warm_buf(std::size_t{64} << 20);
  const auto warm = [&] {
    (void)read_to_pinned(o, false, 16, std::size_t{16} << 20);  // page cache holds the file
  };
  const auto has = [&](const char *w) { return o.what.count(w) != 0; };

  if (has("h2d_pinned")) {
    for (int r = 0; r < o.repeat; ++r) {
      emit("h2d_pinned", "\"chunk\":268435456", o.size, h2d_pinned(o, device));
    }
  }
  warm();
  if (has("read_pinned")) {
    for (const int t : {8, 16}) {
      for (int r = 0; r < o.repeat; ++r) {
        emit("read_pinned",
             "\"cache\":\"warm\",\"threads\":" + std::to_string(t) + ",\"chunk\":16777216", o.size,
             read_to_pinned(o, false, t, std::size_t{16} << 20));
      }
    }
  }
  const auto compat_run = [&](const char *cache, bool direct) {
    for (int r = 0; r < (direct ? 1 : o.repeat); ++r) {
      if (direct && !drop_caches()) {
        return;
      }
      std::string error;
      const auto s = engine_load(o, phx::Engine::compat, device, direct, error);
      emit("compat", compat_fields(cache), s ? o.size : 0, s.value_or(0), error);
    }
  };
  if (has("compat")) {
    compat_run("warm", false);
  }
  if (o.sweep) {
    for (const char *threads : {"4", "8", "12", "16"}) {
      for (const char *chunk : {"4M", "8M", "16M", "32M"}) {
        for (const char *depth_per_thread : {"2", "4"}) {
          set_env("PHX_NTHREADS", threads);
          set_env("PHX_CHUNK_SIZE", chunk);
          set_env("PHX_QUEUE_DEPTH",
                  std::to_string(std::atoi(threads) * std::atoi(depth_per_thread)));
          std::string error;
          double best = 1e30;
          for (int r = 0; r < 2; ++r) {
            const auto s = engine_load(o, phx::Engine::compat, device, false, error);
            best = std::min(best, s.value_or(1e30));
          }
          emit("compat_sweep", compat_fields("warm"), best < 1e30 ? o.size : 0,
               best < 1e30 ? best : 0, error);
        }
      }
    }
    ::unsetenv("PHX_NTHREADS");     // NOLINT(concurrency-mt-unsafe)
    ::unsetenv("PHX_CHUNK_SIZE");   // NOLINT(concurrency-mt-unsafe)
    ::unsetenv("PHX_QUEUE_DEPTH");  // NOLINT(concurrency-mt-unsafe)
  }
  if (has("naive")) {
    warm();
    emit("naive", "\"cache\":\"warm\",\"threads\":1,\"chunk\":67108864", o.size, naive(o, device));
  }
  if (has("cufile")) {
    std::string error;
    const auto t0 = Clock::now();
    const auto s = engine_load(o, phx::Engine::cufile, device, true, error);
    if (!s) {
      error += " (after " +
               std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) + " s)";
    }
    emit("cufile", "\"cache\":\"cold-ish\",\"direct\":true", s ? o.size : 0, s.value_or(0), error);
  }
  if (o.cold && can_drop) {
    if (has("read_direct")) {
      for (const int t : {8, 16}) {
        (void)drop_caches();
        emit("read_direct",
             "\"cache\":\"cold\",\"direct\":true,\"threads\":" + std::to_string(t) +
                 ",\"chunk\":16777216",
             o.size, read_to_pinned(o, true, t, std::size_t{16} << 20));
      }
    }
    if (has("compat")) {
      compat_run("cold", true);
    }
    if (has("naive")) {
      (void)drop_caches();
      emit("naive", "\"cache\":\"cold\",\"threads\":1,\"chunk\":67108864", o.size,
           naive(o, device));
    }
  }
  (void)cudaFree(device);
  return 0;
}
