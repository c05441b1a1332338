// SPDX-License-Identifier: MIT
// phoenix.hpp - libphoenix C++ API.
//
//   auto dev = phx::Device::open(0);                    // engine: auto
//   auto reg = dev.register_memory(gpu_ptr, bytes);     // pins + maps
//   phx::File f("/data/weights.bin", O_RDONLY);         // O_DIRECT if possible
//   std::size_t n = f.read(reg, 0, bytes, 0);           // straight into device memory
//
// Handles are move-only RAII objects; failures throw std::system_error (or
// phx::IoError, which also carries the bytes done before the failure) with a
// message naming the file, offset and size.
#ifndef PHOENIX_PHOENIX_HPP
#define PHOENIX_PHOENIX_HPP

#include <fcntl.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "phoenix/config.h"

#if defined(__GNUC__)
#define PHX_EXPORT __attribute__((visibility("default")))
#else
#define PHX_EXPORT
#endif

// A CUDA stream (cudaStream_t and CUstream are pointers to this type).
struct CUstream_st;

namespace phx {

namespace detail {
class DeviceState;
class Mapping;
class Ring;
struct RegistrationAccess;
}  // namespace detail

/// How bytes reach the registered memory.
enum class Engine {
  automatic,  ///< PHX_ENGINE if set, else direct when /dev/phxfs_devN exists, else
              ///< compat when the device has a CUDA GPU, else host
  direct,     ///< phxfs.ko maps the device pages; I/O is O_DIRECT on that mapping
  host,       ///< registered memory is host memory (CPU baseline, no module needed)
  compat,     ///< CUDA GPU without the module: pinned staging buffers + cuMemcpyAsync
  cufile,     ///< NVIDIA cuFile (GDS), loaded at run time: a baseline for comparisons
};

/// "auto", "direct", "host", "compat", "cufile".
[[nodiscard]] PHX_EXPORT std::string_view to_string(Engine engine) noexcept;
/// Parses the names above and the tools' older ones ("automatic" for auto,
/// "phoenix" for direct, "gds" for cufile); throws std::system_error(EINVAL)
/// naming the bad value.
[[nodiscard]] PHX_EXPORT Engine parse_engine(std::string_view name);

/// What an engine can do beyond File::read/write, which every engine serves.
/// A call that needs a capability the device's engine lacks throws
/// std::system_error(ENOTSUP) naming the engine and the capability.
///
///   capability      direct  host  compat  cufile   used by
///   device_memory   yes     -     yes     yes      register_memory() takes device memory
///   host_view       yes     yes   -       -        Registration::host_view(), phxfs_regmem()
///   io_queue        yes     yes   -       -        IoRequest / IoQueue
///   gather          yes     yes   yes     -        phx::Gather
///   staged          -       -     yes     -        (how bytes move; nothing is refused)
///
/// Stream-ordered I/O (File::read_async, phxfs_read_async) runs on every
/// engine in builds with CUDA, on a machine with a CUDA driver (else ENOTSUP).
struct EngineCapabilities {
  /// register_memory() takes device memory; without it, host memory.
  bool device_memory = false;
  /// Registration::host_view() is the registered memory's address in this
  /// process, for pread/pwrite/io_uring.  Without it host_view() is null,
  /// view() is {nullptr, size()} and phxfs_regmem() returns the device address.
  bool host_view = false;
  /// IoRequest::read/write take its registrations (io_uring needs a host view).
  bool io_queue = false;
  /// phx::Gather runs on its devices.
  bool gather = false;
  /// Bytes pass through pinned host staging buffers and GPU copies.
  bool staged = false;
};
/// The capabilities of @p engine.  Throws std::system_error(EINVAL) for
/// Engine::automatic (resolve it with choose_engine() first).
[[nodiscard]] PHX_EXPORT EngineCapabilities engine_capabilities(Engine engine);

/// The engine a device would get, and why.
struct EngineChoice {
  Engine engine = Engine::host;
  std::string reason;
};
/// Resolves @p requested (automatic consults PHX_ENGINE, then looks for the
/// module's device node) without opening anything.
[[nodiscard]] PHX_EXPORT EngineChoice choose_engine(int device_id,
                                                    Engine requested = Engine::automatic);

/// CUDA's ordinal of the GPU behind Phoenix device @p device_id, for
/// cudaSetDevice and the like, or -1 where there is no such GPU (or no
/// CUDA).  Phoenix ids follow PCI bus order and CUDA's ordinals need not
/// (docs/gpu.md, "Device numbering").
[[nodiscard]] PHX_EXPORT int cuda_ordinal(int device_id) noexcept;

/// Stops the engines kept set up after their devices closed.  Devices of
/// one GPU open at the same time share a compat engine (copy threads,
/// streams, pinned staging), and the latest one of each device outlives its
/// last close, so that the next Device::open() (a new Loader's, a one-line
/// load's) starts with its threads running and its staging pinned; it stays
/// until this call or the end of the process.  An engine some device still
/// uses stops at that device's close instead.  Returns how many engines
/// were idle and are stopped now.
PHX_EXPORT std::size_t release_idle_engines() noexcept;

/// How the C API's reads (phxfs_read, phxfs_read_async) treat a descriptor
/// the caller opened with O_DIRECT.  File chooses by its DirectIo instead.
enum class ReadCache {
  /// The cache policy, per read: a range the page cache holds (at least
  /// half of its pages) is read through a buffered descriptor of the same
  /// file, any other O_DIRECT.  The direct engine's memory stays O_DIRECT.
  automatic,
  descriptor,  ///< as the descriptor was opened
};

/// Tunables of one device and the I/O through it, one meaning per name.
///
/// Options{} holds the built-in defaults; Options::defaults() is those with
/// the PHX_* environment variables applied, read once per process (a
/// malformed value throws std::system_error(EINVAL) naming the variable).
/// Device::open(id, options) overrides them for one device; IoQueue,
/// GatherOptions and LoadOptions take per-call values where 0 means "the
/// device's" (or, without a device, the process default).  The variables:
/// docs/configuration.md.
struct PHX_EXPORT Options {
  /// PHX_ENGINE.  automatic: the process default (PHX_ENGINE), else detection.
  Engine engine = Engine::automatic;
  /// PHX_QUEUE_DEPTH: io_uring entries of an IoQueue or a gather, 1..32768.
  unsigned queue_depth = 128;
  /// PHX_STAGING_SIZE: each I/O thread's host bounce buffer for the
  /// unaligned edges of O_DIRECT transfers and for memory O_DIRECT cannot
  /// take (and storage refusing peer memory), 4 KiB..1 GiB.
  std::size_t staging_bytes = std::size_t{4} << 20;
  /// PHX_COPY_THREADS: copy threads of a compat device, 1..256.  8 to 16
  /// threads with 4 MiB chunks all reached 50-52 GB/s warm on an H200 with
  /// 16 cores (docs/gpu.md).
  unsigned copy_threads = 12;
  /// PHX_COPY_DEPTH: chunks in flight per copy thread, 2..64 (one is read
  /// while another is copied).
  unsigned copy_depth = 2;
  /// PHX_COPY_CHUNK: bytes per chunk (one pread/pwrite and one copy) on a
  /// buffered descriptor, 4 KiB..1 GiB, rounded up to 4 KiB.  Small chunks
  /// stay in the CPU caches between the read and the DMA.
  std::size_t copy_chunk = std::size_t{4} << 20;
  /// PHX_COPY_DIRECT_CHUNK: the same for O_DIRECT descriptors, where the
  /// disk wants more bytes in flight (1.2 GB/s with 4 MiB chunks, 1.7 GB/s,
  /// the read-to-pinned ceiling, with 16 MiB on a virtio disk).
  std::size_t copy_direct_chunk = std::size_t{16} << 20;
  /// PHX_STREAM_WORKERS: threads that run a device's stream-ordered I/O,
  /// 1..1024; more operations in flight wait in order for one.
  unsigned stream_workers = 16;
  /// PHX_STREAM_STAGING: pinned host memory a compat device's stream-ordered
  /// I/O may hold, 64 KiB..64 GiB; a submit beyond it waits for earlier
  /// operations to return theirs.
  std::size_t stream_staging_bytes = std::size_t{256} << 20;
  /// PHX_STREAM_LANES: threads that read one staged stream-ordered read's
  /// chunks at once, 1..64 (at most one per staging slot of the read: the
  /// default is one per slot at the default copy_depth, 2 x 2).  1 reads
  /// them one after another on the read's I/O thread, and a warm read then
  /// moves at about one thread's page-cache copy rate (docs/lmcache.md).
  unsigned stream_lanes = 4;
  /// PHX_READ_CACHE (auto or descriptor): the C API's reads through an
  /// O_DIRECT descriptor of ranges the page cache holds.
  ReadCache read_cache = ReadCache::automatic;
  /// PHX_COPY_SPIN_US: microseconds an idle copy thread of a compat device,
  /// and a caller waiting for them, poll before they sleep, 0..10000 (0:
  /// sleep at once).  A synchronous read that sleeps pays two thread
  /// wake-ups, which a back-to-back caller (cuFileRead in a loop) pays on
  /// every call.
  unsigned copy_spin_us = 100;

  /// The built-in defaults with the environment applied (read now).
  [[nodiscard]] static Options from_environment();
  /// from_environment() as read the first time any caller asked, or what
  /// set_defaults() last published.
  [[nodiscard]] static Options defaults();
  /// Makes @p options the process defaults (validated first: throws
  /// std::system_error(EINVAL) naming a field out of range): what devices and
  /// engines set up from now on take (Device::open(id), the Python package's
  /// files).  Devices already open keep theirs.  An engine other than
  /// automatic is chosen for every device that asks for the default one.
  static void set_defaults(const Options &options);
  /// Throws std::system_error(EINVAL) naming the first field out of range.
  void validate() const;

  friend bool operator==(const Options &, const Options &) = default;
};

/// What the phxfs module reports for one device (GET_INFO).
struct ModuleDeviceInfo {
  std::uint32_t abi_version = 0;
  std::uint32_t device_index = 0;
  std::uint32_t provider = 0;  ///< PHXFS_PROVIDER_*
  std::string provider_name;
  std::uint32_t pci_domain = 0;
  std::uint32_t pci_bdf = 0;
  std::uint32_t page_size = 0;
  std::uint32_t flags = 0;
  std::uint64_t bar_size = 0;
  std::uint64_t regs_live = 0;
  std::uint64_t regs_total = 0;
  std::uint64_t pages_mapped = 0;
  std::uint64_t revocations = 0;
  std::uint64_t errors = 0;
};
/// Opens /dev/phxfs_dev<id> and asks for GET_INFO; throws std::system_error
/// (EINVAL bad id, ENODEV when the node is absent, EPROTO on an ABI mismatch).
[[nodiscard]] PHX_EXPORT ModuleDeviceInfo query_module_device(int device_id);

class Registration;

/// One device (GPU, or the PCI BAR standing for one) opened with an engine.
class PHX_EXPORT Device {
 public:
  /// Throws std::system_error: EINVAL bad id or engine, ENODEV the direct
  /// engine forced without the module, ENOTSUP an engine not built.
  [[nodiscard]] static Device open(int device_id, Engine engine = Engine::automatic);
  /// Opens with @p options (validated; options.engine as @p engine above).
  [[nodiscard]] static Device open(int device_id, const Options &options);

  Device(Device &&) noexcept;
  Device &operator=(Device &&) noexcept;
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;
  ~Device();

  [[nodiscard]] int id() const noexcept;
  [[nodiscard]] Engine engine() const noexcept;
  /// Why this engine was chosen.
  [[nodiscard]] const std::string &engine_reason() const noexcept;
  /// What engine() can do (engine_capabilities(engine())).
  [[nodiscard]] EngineCapabilities capabilities() const noexcept;
  /// The options it was opened with (engine: the one asked for).
  [[nodiscard]] const Options &options() const noexcept;

  /// Registers [addr, addr + size) and maps it into one contiguous host
  /// virtual range.  Any size; for the direct engine an unaligned range is
  /// widened to the module's page size underneath and the view points at addr.
  /// Throws: EINVAL bad range or partial overlap, EEXIST same range twice,
  /// EFAULT (host engine) range not mapped in this process, and the
  /// module's errors.
  [[nodiscard]] Registration register_memory(void *addr, std::size_t size);

  /// Live registrations on this device.
  [[nodiscard]] std::size_t registration_count() const;

 private:
  explicit Device(std::shared_ptr<detail::DeviceState> state);
  std::shared_ptr<detail::DeviceState> state_;
};

/// A registered range of device memory and its host view.  Deregisters on
/// destruction; I/O in flight keeps the mapping alive until it completes.
class PHX_EXPORT Registration {
 public:
  Registration() = default;
  Registration(Registration &&) noexcept;
  Registration &operator=(Registration &&) noexcept;
  Registration(const Registration &) = delete;
  Registration &operator=(const Registration &) = delete;
  ~Registration();

  /// The device address given to register_memory().
  [[nodiscard]] void *device_address() const noexcept;
  /// Host virtual address of device_address(): pass it to pread/pwrite/io_uring.
  /// Null for engines without the host_view capability (compat, cufile).
  [[nodiscard]] std::byte *host_view() const noexcept;
  [[nodiscard]] std::size_t size() const noexcept;
  /// {host_view(), size()}: {nullptr, size()} without a host view.
  [[nodiscard]] std::span<std::byte> view() const noexcept;
  [[nodiscard]] explicit operator bool() const noexcept { return mapping_ != nullptr; }

  /// Deregisters now (as the destructor does).  The device pages stay mapped
  /// until I/O still using them completes.
  void release() noexcept;

 private:
  friend class Device;
  friend class File;
  friend class IoQueue;
  friend struct detail::RegistrationAccess;
  Registration(std::shared_ptr<detail::DeviceState> device,
               std::shared_ptr<detail::Mapping> mapping);
  std::shared_ptr<detail::DeviceState> device_;
  std::shared_ptr<detail::Mapping> mapping_;
};

/// Whether File's I/O goes through the page cache.
enum class DirectIo {
  preferred,  ///< O_DIRECT when the filesystem supports it, buffered otherwise
  required,   ///< fail with EINVAL when the filesystem does not support O_DIRECT
  off,        ///< buffered I/O
  /// The cache policy, per read (the default): a read of a range the page
  /// cache holds (at least half of its pages) goes through the page cache,
  /// any other read O_DIRECT, as with preferred.  Memory the direct engine
  /// maps is always read O_DIRECT; writes are O_DIRECT as with preferred.
  automatic,
};

/// std::system_error with the bytes transferred before the failure.
class PHX_EXPORT IoError : public std::system_error {
 public:
  IoError(int err, const std::string &what, std::size_t bytes_done);
  [[nodiscard]] std::size_t bytes_done() const noexcept { return bytes_done_; }

 private:
  std::size_t bytes_done_;
};

/// A file (or block device) opened for Phoenix I/O.
class PHX_EXPORT File {
 public:
  /// @p flags are open(2) flags (O_RDONLY, O_RDWR|O_CREAT, ...); O_DIRECT is
  /// managed by @p direct, O_APPEND is rejected (pwrite would ignore offsets).
  File(std::filesystem::path path, int flags, mode_t mode = 0644,
       DirectIo direct = DirectIo::automatic);
  File(File &&) noexcept;
  File &operator=(File &&) noexcept;
  File(const File &) = delete;
  File &operator=(const File &) = delete;
  ~File();

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] const std::filesystem::path &path() const noexcept { return path_; }
  /// True when the descriptor has O_DIRECT.
  [[nodiscard]] bool direct_io() const noexcept { return direct_; }
  /// Whether a read of [@p offset, @p offset + @p length) into host memory
  /// or compat GPU memory would go through the page cache now: always with
  /// DirectIo::off or without O_DIRECT, never with preferred or required,
  /// and by the page cache's residency (cached_fraction() >= 0.5) with
  /// DirectIo::automatic.
  [[nodiscard]] bool reads_buffered(std::uint64_t offset, std::uint64_t length) const noexcept;
  /// Required O_DIRECT alignment of file offsets and of memory (1 when buffered).
  [[nodiscard]] std::size_t offset_alignment() const noexcept { return offset_align_; }
  [[nodiscard]] std::size_t memory_alignment() const noexcept { return memory_align_; }
  [[nodiscard]] std::uint64_t size() const;
  /// Fraction (0 to 1) of [@p offset, @p offset + @p length) that the page
  /// cache holds (mincore; exact up to 64 MiB, sampled past that; 0 when it
  /// cannot be told): whether a buffered read would be served from memory.
  [[nodiscard]] double cached_fraction(std::uint64_t offset, std::uint64_t length) const noexcept;

  /// Reads @p size bytes at @p file_offset into @p reg at @p reg_offset.
  /// Returns the bytes read (short only at end of file); throws IoError.
  [[nodiscard]] std::size_t read(const Registration &reg, std::size_t reg_offset, std::size_t size,
                                 std::uint64_t file_offset);
  /// Writes @p size bytes of @p reg at @p reg_offset to @p file_offset.
  std::size_t write(const Registration &reg, std::size_t reg_offset, std::size_t size,
                    std::uint64_t file_offset);
  /// Stream-ordered read: runs after the work already enqueued on @p stream
  /// (a cudaStream_t; null is the legacy default stream) and the stream's
  /// later work waits for it.  Returns once enqueued; with the compat
  /// engine that may first wait for earlier stream-ordered I/Os of the
  /// device to give back pinned staging (256 MiB per device by default),
  /// so a stream must not wait, through host code, for an I/O enqueued
  /// after its own.  When the stream passes the operation, *@p bytes_done
  /// (if not null) holds the bytes read (short only at end of file) or
  /// -errno.  This File, @p reg and *@p bytes_done must stay alive until
  /// then.  I/Os on different streams run concurrently, on at most 16 I/O
  /// threads per device by default (more wait their turn, oldest first).
  /// Throws std::system_error: ENOTSUP without CUDA, EINVAL bad range or a
  /// stream capturing a graph.
  void read_async(const Registration &reg, std::size_t reg_offset, std::size_t size,
                  std::uint64_t file_offset, ssize_t *bytes_done, CUstream_st *stream);
  /// The write counterpart of read_async().
  void write_async(const Registration &reg, std::size_t reg_offset, std::size_t size,
                   std::uint64_t file_offset, ssize_t *bytes_done, CUstream_st *stream);
  /// The same on plain host memory.
  [[nodiscard]] std::size_t read(std::span<std::byte> dst, std::uint64_t file_offset);
  std::size_t write(std::span<const std::byte> src, std::uint64_t file_offset);

  void sync();
  void truncate(std::uint64_t size);

 private:
  void submit_async(bool is_write, const Registration &reg, std::size_t reg_offset,
                    std::size_t size, std::uint64_t file_offset, ssize_t *bytes_done,
                    CUstream_st *stream);
  // reg is null for plain host memory at host; otherwise host is ignored.
  [[nodiscard]] std::size_t transfer(bool is_write, const Registration *reg, std::size_t reg_offset,
                                     std::byte *host, std::size_t size, std::uint64_t file_offset);
  // The descriptor and policy a read of this range and memory uses.
  [[nodiscard]] int read_fd(const Registration *reg, std::uint64_t offset,
                            std::size_t size) const noexcept;
  int fd_ = -1;
  // DirectIo::automatic: a buffered, read-only descriptor of the same file
  // for reads the page cache can serve; -1 otherwise.
  int buffered_fd_ = -1;
  std::filesystem::path path_;
  bool direct_ = false;
  std::size_t offset_align_ = 1;
  std::size_t memory_align_ = 1;
};

enum class IoOp { read, write };

/// One request of a batch.  Build with the factories so the target is
/// resolved and bounds-checked.
struct PHX_EXPORT IoRequest {
  IoOp op = IoOp::read;
  File *file = nullptr;
  std::byte *buffer = nullptr;  ///< host view of the target
  std::size_t size = 0;
  std::uint64_t offset = 0;  ///< file offset
  std::uint64_t user_data = 0;

  /// Throws std::system_error(EINVAL) when [reg_offset, +size) is outside @p reg,
  /// ENOTSUP when its engine lacks the io_queue capability (compat, cufile).
  [[nodiscard]] static IoRequest read(File &file, const Registration &reg, std::size_t reg_offset,
                                      std::size_t size, std::uint64_t offset,
                                      std::uint64_t user_data = 0);
  [[nodiscard]] static IoRequest write(File &file, const Registration &reg, std::size_t reg_offset,
                                       std::size_t size, std::uint64_t offset,
                                       std::uint64_t user_data = 0);
};

/// Outcome of one request: bytes done, and 0 or the errno that stopped it.
struct IoCompletion {
  std::uint64_t user_data = 0;
  std::size_t bytes = 0;
  int error = 0;
};

/// Batched, asynchronous submission through io_uring.  Accepts any number of
/// requests of any size: they are fed to the ring as slots free up, split at
/// 1 GiB, and resubmitted on short transfers until done or end of file.
/// Requests the descriptor's O_DIRECT alignment cannot take as they are run
/// synchronously with staging and complete like the others.  Destruction
/// waits for requests in the ring and drops queued ones never submitted.
/// Not thread-safe: use one queue per thread.
class PHX_EXPORT IoQueue {
 public:
  /// @p depth: ring entries (0: Options::defaults().queue_depth, 128 unless
  /// PHX_QUEUE_DEPTH says otherwise).
  explicit IoQueue(unsigned depth = 0);
  IoQueue(IoQueue &&) noexcept;
  IoQueue &operator=(IoQueue &&) noexcept;
  IoQueue(const IoQueue &) = delete;
  IoQueue &operator=(const IoQueue &) = delete;
  ~IoQueue();

  [[nodiscard]] unsigned depth() const noexcept;
  /// Queues requests and submits as many as the ring takes now.
  void submit(std::span<const IoRequest> requests);
  /// Requests submitted or queued and not yet returned by wait().
  [[nodiscard]] std::size_t outstanding() const noexcept;
  /// Blocks until at least @p min_completions requests finished (fewer only
  /// when fewer are outstanding) and returns every completion available.
  [[nodiscard]] std::vector<IoCompletion> wait(std::size_t min_completions = 1);
  /// submit() then wait for all of them.
  [[nodiscard]] std::vector<IoCompletion> run(std::span<const IoRequest> requests);

 private:
  std::unique_ptr<detail::Ring> ring_;
};

}  // namespace phx

#endif  // PHOENIX_PHOENIX_HPP
