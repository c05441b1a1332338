// SPDX-License-Identifier: MIT
// phx-demo: writes a file with a known pattern, reads it back through
// libphoenix three ways (sync C++ API, io_uring batches, C API) into
// registered memory, and verifies every byte.  Human summary by default;
// --json prints one record per read on stdout (the summary then goes to
// stderr).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "common/json_record.hpp"
#include "common/pattern.hpp"
#include "phoenix/phoenix.h"
#include "phoenix/phoenix.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kDefaultSeed = 0x50485844454d4fULL;  // "PHXDEMO"
// Large enough that generating the file is not dominated by syscalls.
constexpr std::size_t kWriteChunk = 8 * kMiB;

struct Options {
  std::uint64_t size = 256 * kMiB;
  std::string dir;
  std::uint64_t request = kMiB;
  unsigned depth = 32;
  std::string engine = "auto";
  int device = 0;
  std::uint64_t seed = kDefaultSeed;
  bool json = false;
  bool keep = false;
};

std::string human_bytes(std::uint64_t bytes) {
  if (bytes < 1024) {
    return std::to_string(bytes) + " B";
  }
  if (bytes % kMiB == 0) {
    return std::to_string(bytes / kMiB) + " MiB";
  }
  if (bytes % 1024 == 0) {
    return std::to_string(bytes / 1024) + " KiB";
  }
  const bool mib = bytes >= kMiB;
  std::array<char, 32> text{};
  (void)std::snprintf(text.data(), text.size(), "%.1f %s",
                      static_cast<double>(bytes) / static_cast<double>(mib ? kMiB : 1024),
                      mib ? "MiB" : "KiB");
  return text.data();
}

[[noreturn]] void throw_errno(int err, const std::string &what) {
  throw std::system_error(err, std::generic_category(), what);
}

// Page-aligned anonymous memory, pre-faulted so that page faults are not
// counted as I/O time.
class HostBuffer {
 public:
  explicit HostBuffer(std::size_t size) : size_(round_up(size)) {
    void *p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      throw_errno(err, "mmap of a " + std::to_string(size_) + "-byte buffer");
    }
    data_ = static_cast<std::byte *>(p);
  }
  ~HostBuffer() { ::munmap(data_, size_); }
  HostBuffer(const HostBuffer &) = delete;
  HostBuffer &operator=(const HostBuffer &) = delete;
  HostBuffer(HostBuffer &&) = delete;
  HostBuffer &operator=(HostBuffer &&) = delete;

  [[nodiscard]] std::byte *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  static std::size_t round_up(std::size_t size) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (std::max<std::size_t>(size, 1) + page - 1) / page * page;
  }
  std::byte *data_ = nullptr;
  std::size_t size_;
};

struct XxhStateDeleter {
  void operator()(XXH3_state_t *state) const noexcept { XXH3_freeState(state); }
};

struct Generated {
  XXH128_hash_t hash{};
  double seconds = 0;
  bool direct_io = false;
};

Generated write_pattern_file(const fs::path &path, std::uint64_t size, std::uint64_t seed) {
  const std::unique_ptr<XXH3_state_t, XxhStateDeleter> state(XXH3_createState());
  if (!state || XXH3_128bits_reset(state.get()) != XXH_OK) {
    throw_errno(ENOMEM, "XXH3_createState");
  }
  const HostBuffer chunk(kWriteChunk);
  // Written with O_DIRECT where possible, so the file does not start out in
  // the page cache.
  phx::File file(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  const auto start = Clock::now();
  for (std::uint64_t offset = 0; offset < size;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kWriteChunk, size - offset));
    phxtools::fill_pattern({chunk.data(), n}, offset, seed);
    (void)XXH3_128bits_update(state.get(), chunk.data(), n);
    file.write(std::span<const std::byte>(chunk.data(), n), offset);
    offset += n;
  }
  file.sync();
  Generated out;
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.hash = XXH3_128bits_digest(state.get());
  out.direct_io = file.direct_io();
  return out;
}

// First byte of @p data that differs from the pattern, if any.
std::optional<std::uint64_t> first_mismatch(const std::byte *data, std::uint64_t size,
                                            std::uint64_t seed) {
  return phxtools::find_mismatch({data, static_cast<std::size_t>(size)}, 0, seed);
}

// Fraction of the file's pages in the page cache right now.
std::optional<double> cached_fraction(const fs::path &path, std::uint64_t size) {
  if (size == 0) {
    return std::nullopt;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT(*-vararg)
  if (fd < 0) {
    return std::nullopt;
  }
  void *map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    return std::nullopt;
  }
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  std::optional<double> fraction;
  if (::mincore(map, size, resident.data()) == 0) {
    const auto cached = std::count_if(resident.begin(), resident.end(),
                                      [](unsigned char v) { return (v & 1U) != 0; });
    fraction = static_cast<double>(cached) / static_cast<double>(resident.size());
  }
  ::munmap(map, size);
  return fraction;
}

// Drops the file's clean pages from the page cache (no privilege needed for
// a file we can open), so every read starts cold where the filesystem allows.
void drop_cache(const fs::path &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT(*-vararg)
  if (fd >= 0) {
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

std::string cache_label(std::optional<double> fraction) {
  if (!fraction.has_value()) {
    return "unknown";
  }
  const double f = *fraction;
  if (f < 0.01) {
    return "cold";
  }
  if (f > 0.99) {
    return "warm";
  }
  return "partly warm (" + std::to_string(static_cast<int>(f * 100)) + "%)";
}

struct ModeResult {
  std::string mode;
  std::string api;
  std::string requests;
  std::uint64_t request_size = 0;
  unsigned depth = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  bool direct_io = false;
  std::optional<double> cached_before;
  bool verified = false;
  std::optional<std::uint64_t> mismatch;
  std::string error;

  [[nodiscard]] double gbps() const {
    return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
  }
};

struct Context {
  const Options &opt;
  fs::path file;
  XXH128_hash_t expected{};
  const HostBuffer &buffer;
};

// Clears the target, drops the cache, runs @p read and verifies the bytes.
template <typename Read>
ModeResult run_mode(const Context &ctx, ModeResult result, Read &&read) {
  std::memset(ctx.buffer.data(), 0, ctx.buffer.size());
  drop_cache(ctx.file);
  result.cached_before = cached_fraction(ctx.file, ctx.opt.size);
  try {
    const auto start = Clock::now();
    result.bytes = read(result);
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  } catch (const std::exception &e) {
    result.error = e.what();
    return result;
  }
  if (result.bytes != ctx.opt.size) {
    result.error =
        "read " + std::to_string(result.bytes) + " of " + std::to_string(ctx.opt.size) + " bytes";
    return result;
  }
  const XXH128_hash_t got = XXH3_128bits(ctx.buffer.data(), ctx.opt.size);
  result.verified = XXH128_isEqual(got, ctx.expected) != 0;
  if (!result.verified) {
    result.mismatch = first_mismatch(ctx.buffer.data(), ctx.opt.size, ctx.opt.seed);
  }
  return result;
}

ModeResult read_sync(const Context &ctx, const phx::Registration &reg) {
  ModeResult r;
  r.mode = "sync";
  r.api = "phx::File::read";
  r.requests = "1 call";
  return run_mode(ctx, std::move(r), [&](ModeResult &res) {
    phx::File file(ctx.file, O_RDONLY);
    res.direct_io = file.direct_io();
    return static_cast<std::uint64_t>(file.read(reg, 0, ctx.opt.size, 0));
  });
}

ModeResult read_batched(const Context &ctx, const phx::Registration &reg) {
  ModeResult r;
  r.mode = "batch";
  r.api = "phx::IoQueue";
  r.request_size = ctx.opt.request;
  r.depth = ctx.opt.depth;
  const std::uint64_t count = (ctx.opt.size + ctx.opt.request - 1) / ctx.opt.request;
  r.requests = std::to_string(count) + " x " + human_bytes(ctx.opt.request) + ", depth " +
               std::to_string(ctx.opt.depth);
  return run_mode(ctx, std::move(r), [&](ModeResult &res) {
    phx::File file(ctx.file, O_RDONLY);
    res.direct_io = file.direct_io();
    phx::IoQueue queue(ctx.opt.depth);
    std::vector<phx::IoRequest> requests;
    requests.reserve(count);
    for (std::uint64_t offset = 0; offset < ctx.opt.size; offset += ctx.opt.request) {
      const auto n =
          static_cast<std::size_t>(std::min<std::uint64_t>(ctx.opt.request, ctx.opt.size - offset));
      requests.push_back(phx::IoRequest::read(file, reg, offset, n, offset, offset));
    }
    std::uint64_t total = 0;
    for (const phx::IoCompletion &c : queue.run(requests)) {
      if (c.error != 0) {
        throw_errno(c.error, "request at offset " + std::to_string(c.user_data));
      }
      const std::uint64_t want =
          std::min<std::uint64_t>(ctx.opt.request, ctx.opt.size - c.user_data);
      if (c.bytes != want) {
        throw_errno(EIO, "request at offset " + std::to_string(c.user_data) + " read " +
                             std::to_string(c.bytes) + " of " + std::to_string(want) + " bytes");
      }
      total += c.bytes;
    }
    return total;
  });
}

[[noreturn]] void throw_c_api(const char *call) {
  const int err = errno;
  throw_errno(err, std::string(call) + ": " + phxfs_last_error());
}

// The C API keeps its own table of open devices, independent of phx::Device.
// @p automatic: open as the paper does (phxfs_open, engine chosen by the
// library); otherwise force the engine the C++ side got.
ModeResult read_c_api(const Context &ctx, bool automatic, phx::Engine engine) {
  ModeResult r;
  r.mode = "c-api";
  r.api = "phxfs_read";
  r.requests = "1 call";
  return run_mode(ctx, std::move(r), [&](ModeResult &res) {
    const int dev = ctx.opt.device;
    const phxfs_engine_t c_engine =
        engine == phx::Engine::direct ? PHXFS_ENGINE_DIRECT : PHXFS_ENGINE_HOST;
    if (automatic ? phxfs_open(dev) != 0 : phxfs_open_engine(dev, c_engine) != 0) {
      throw_c_api(automatic ? "phxfs_open" : "phxfs_open_engine");
    }
    if (const phxfs_engine_t got = phxfs_device_engine(dev); got != c_engine) {
      (void)phxfs_close(dev);
      throw_errno(EPROTO, std::string("the C API chose the ") + phxfs_engine_name(got) +
                              " engine, the C++ API the " + std::string(phx::to_string(engine)));
    }
    void *target = nullptr;
    if (phxfs_regmem(dev, ctx.buffer.data(), ctx.buffer.size(), &target) != 0) {
      const int err = errno;
      (void)phxfs_close(dev);
      errno = err;
      throw_c_api("phxfs_regmem");
    }
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
    int fd = ::open(ctx.file.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {
      fd = ::open(ctx.file.c_str(), O_RDONLY | O_CLOEXEC);  // NOLINT(*-vararg)
    }
    if (fd < 0) {
      const int err = errno;
      (void)phxfs_deregmem(dev, ctx.buffer.data(), ctx.buffer.size());
      (void)phxfs_close(dev);
      throw_errno(err, "open " + ctx.file.string());
    }
    res.direct_io = (::fcntl(fd, F_GETFL) & O_DIRECT) != 0;  // NOLINT(*-vararg)
    const phxfs_fileid_t fid = {fd, dev};
    const ssize_t n = phxfs_read(fid, ctx.buffer.data(), 0, ctx.opt.size, 0);
    const int err = errno;
    const std::string message = phxfs_last_error();
    ::close(fd);
    (void)phxfs_deregmem(dev, ctx.buffer.data(), ctx.buffer.size());
    (void)phxfs_close(dev);
    if (n < 0) {
      throw_errno(err, "phxfs_read: " + message);
    }
    return static_cast<std::uint64_t>(n);
  });
}

// A fresh directory under /var/tmp (usually disk-backed, so O_DIRECT works,
// where /tmp is often tmpfs), or the file inside --dir.  Removed at exit
// unless --keep.
class Workspace {
 public:
  explicit Workspace(const Options &opt) : keep_(opt.keep) {
    if (opt.dir.empty()) {
      std::string templ = "/var/tmp/phx-demo.XXXXXX";
      if (::mkdtemp(templ.data()) == nullptr) {
        const int err = errno;
        throw_errno(err, "mkdtemp " + templ);
      }
      dir_ = templ;
      own_dir_ = true;
    } else {
      dir_ = opt.dir;
      fs::create_directories(dir_);
    }
    file_ = dir_ / "phx-demo.dat";
  }
  ~Workspace() {
    if (keep_) {
      return;
    }
    std::error_code ec;
    fs::remove(file_, ec);
    if (own_dir_) {
      fs::remove(dir_, ec);
    }
  }
  Workspace(const Workspace &) = delete;
  Workspace &operator=(const Workspace &) = delete;
  Workspace(Workspace &&) = delete;
  Workspace &operator=(Workspace &&) = delete;

  [[nodiscard]] const fs::path &file() const noexcept { return file_; }

 private:
  bool keep_;
  bool own_dir_ = false;
  fs::path dir_;
  fs::path file_;
};

nlohmann::ordered_json to_json(const ModeResult &r, const Options &opt, const phx::Device &dev,
                               const fs::path &file) {
  nlohmann::ordered_json j = phxtools::record_head("phx-demo");
  j.update(nlohmann::ordered_json{
      {"mode", r.mode},
      {"api", r.api},
      {"engine", std::string(phx::to_string(dev.engine()))},
      {"engine_reason", dev.engine_reason()},
      {"device", opt.device},
      {"file", file.string()},
      {"bytes", r.bytes},
      {"size", opt.size},
      {"o_direct", r.direct_io},
      {"cache_before", cache_label(r.cached_before)},
      {"seconds", r.seconds},
      {"gbps", r.gbps()},
      {"verified", r.verified},
  });
  j["page_cache_fraction"] = phxtools::optional_json(r.cached_before);
  if (r.request_size != 0) {
    j["request_size"] = r.request_size;
    j["depth"] = r.depth;
  }
  j["first_mismatch"] = phxtools::optional_json(r.mismatch);
  j["error"] = r.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.error);
  return j;
}

void print_summary(std::ostream &out, const Options &opt, const phx::Device &dev,
                   const std::string &engine_note, const fs::path &file, const Generated &gen,
                   const std::vector<ModeResult> &results) {
  std::array<char, 256> line{};
  out << "phx-demo: libphoenix " << phxfs_version() << "\n";
  (void)std::snprintf(line.data(), line.size(), "%.2f", gen.seconds);
  out << "file      " << file.string() << "\n"
      << "          " << opt.size << " bytes (" << human_bytes(opt.size)
      << "), the tools' pattern, seed 0x" << std::hex << opt.seed << std::dec << ", written in "
      << line.data() << " s" << (gen.direct_io ? " with O_DIRECT" : "") << "\n";
  out << "engine    " << phx::to_string(dev.engine()) << " on device " << dev.id() << ": "
      << dev.engine_reason() << "\n";
  if (!engine_note.empty()) {
    out << "          " << engine_note << "\n";
  }
  const bool any_direct =
      std::any_of(results.begin(), results.end(), [](const ModeResult &r) { return r.direct_io; });
  out << "O_DIRECT  " << (any_direct ? "yes" : "no: the filesystem refused it, reads are buffered")
      << "\n";
  out << "cache     dropped (posix_fadvise DONTNEED) before each read; the cache column says\n"
         "          how much of the file was still cached (tmpfs keeps all of it)\n\n";

  (void)std::snprintf(line.data(), line.size(), "%-6s %-16s %-26s %12s %9s %7s %-12s %s\n", "mode",
                      "API", "requests", "bytes", "seconds", "GB/s", "cache", "verified");
  out << line.data();
  bool all_ok = true;
  for (const ModeResult &r : results) {
    std::string verified = r.verified ? "yes" : "NO";
    if (!r.error.empty()) {
      verified = "NO: " + r.error;
    } else if (r.mismatch.has_value()) {
      verified = "NO: first mismatch at byte " + std::to_string(*r.mismatch);
    } else if (!r.verified) {
      verified = "NO: hash differs";
    }
    all_ok = all_ok && r.verified;
    (void)std::snprintf(line.data(), line.size(), "%-6s %-16s %-26s %12llu %9.3f %7.2f %-12s ",
                        r.mode.c_str(), r.api.c_str(), r.requests.c_str(),
                        static_cast<unsigned long long>(r.bytes), r.seconds, r.gbps(),
                        cache_label(r.cached_before).c_str());
    out << line.data() << verified << (r.direct_io ? "" : "  (buffered)") << "\n";
  }
  out << "\n"
      << (all_ok ? "All reads verified: every byte matches the pattern (xxh3-128 of the whole "
                   "file compared)."
                 : "VERIFICATION FAILED: see the rows marked NO above.")
      << "\n";
  if (dev.engine() == phx::Engine::host) {
    out << "\nThis machine runs the host-memory engine: the file was read into ordinary host\n"
           "memory through the same registration, alignment and io_uring paths that carry\n"
           "GPU memory under the direct engine, but no device memory was involved.  The\n"
           "demo on emulated hardware (a VM whose NVMe DMAs into a PCI BAR standing in for\n"
           "GPU memory) comes with the phxfs kernel module.\n";
  }
}

int run(const Options &opt) {
  if (opt.size == 0 || opt.request == 0 || opt.depth == 0) {
    throw_errno(EINVAL, "--size, --request and --depth must be positive");
  }
  const phx::Engine requested = phx::parse_engine(opt.engine);
  const phx::EngineChoice choice = phx::choose_engine(opt.device, requested);
  std::string engine_note;
  phx::Engine engine = requested;
  if (choice.engine == phx::Engine::direct || choice.engine == phx::Engine::compat) {
    // Both register device memory, which this tool cannot allocate (no
    // CUDA allocator, no BAR allocator): scripts/demo runs the device
    // version in the rig, phxbench on GPUs.
    const std::string name(phx::to_string(choice.engine));
    if (requested == choice.engine) {
      throw_errno(ENOTSUP, "phx-demo only allocates host memory; the " + name +
                               " engine needs device memory (run with --engine host)");
    }
    engine_note = "auto would pick " + name + " (" + choice.reason +
                  "), but phx-demo only allocates host memory: using the host engine";
    engine = phx::Engine::host;
  }
  // Opened with what the user asked for, so engine_reason() tells why.
  phx::Device dev = phx::Device::open(opt.device, engine);

  const Workspace workspace(opt);
  const Generated gen = write_pattern_file(workspace.file(), opt.size, opt.seed);

  const HostBuffer buffer(static_cast<std::size_t>(opt.size));
  const phx::Registration reg = dev.register_memory(buffer.data(), buffer.size());
  const Context ctx{opt, workspace.file(), gen.hash, buffer};

  std::vector<ModeResult> results;
  results.push_back(read_sync(ctx, reg));
  results.push_back(read_batched(ctx, reg));
  results.push_back(
      read_c_api(ctx, requested == phx::Engine::automatic && engine_note.empty(), dev.engine()));

  phxtools::RecordWriter records(opt.json);
  print_summary(records.human(), opt, dev, engine_note, workspace.file(), gen, results);
  if (opt.json) {
    for (const ModeResult &r : results) {
      records.write(to_json(r, opt, dev, workspace.file()));
    }
  }
  std::cout.flush();
  const bool ok =
      std::all_of(results.begin(), results.end(), [](const ModeResult &r) { return r.verified; });
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
  Options opt;
  CLI::App app{
      "Writes a file with a known pattern, reads it back through libphoenix into registered "
      "memory (sync C++ API, io_uring batches, C API) and verifies every byte.\n"
      "Exit status: 0 verified, 1 verification failed, 2 error."};
  app.add_option("--size", opt.size, "file size (suffixes K, M, G: binary units)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--dir", opt.dir,
                 "directory for the file (default: a new directory under /var/tmp)");
  app.add_option("--request", opt.request, "request size of the io_uring batch")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--depth", opt.depth, "io_uring queue depth")->capture_default_str();
  app.add_option("--engine", opt.engine, "engine: auto, host, direct or compat")
      ->check(CLI::IsMember({"auto", "host", "direct", "compat"}))
      ->capture_default_str();
  app.add_option("--device", opt.device, "device id")->capture_default_str();
  app.add_option("--seed", opt.seed, "pattern seed")->capture_default_str();
  app.add_flag("--json", opt.json, "one JSON line per read on stdout (summary on stderr)");
  app.add_flag("--keep", opt.keep, "keep the file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run(opt);
  } catch (const std::exception &e) {
    std::cerr << "phx-demo: " << e.what() << "\n";
    return 2;
  }
}
