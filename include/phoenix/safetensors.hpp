// SPDX-License-Identifier: MIT
// safetensors.hpp - loading safetensors checkpoints straight into device memory.
//
//   auto ckpt = phx::safetensors::open_checkpoint({"/models/llama"});  // file, folder or index
//   phx::safetensors::LoadOptions opts;                                // engine auto, device 0
//   auto loaded = phx::safetensors::load(ckpt, opts);
//   const phx::safetensors::LoadedTensor &t = loaded.at("lm_head.weight");
//   // t.data: device pointer (CUDA engines) or host pointer (host engine)
//
// Each file's tensors land in one allocation per device, at the offsets they
// have in the file's data section, so the file is read with large aligned
// requests (see docs/model-loading.md).  Failures throw std::system_error
// whose message names the file, the tensor and the problem.
#ifndef PHOENIX_SAFETENSORS_HPP
#define PHOENIX_SAFETENSORS_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "phoenix/phoenix.hpp"

namespace phx::detail {
class GatherMover;
}  // namespace phx::detail

namespace phx::safetensors {

/// Element types of the safetensors format.
enum class Dtype : std::uint8_t {
  boolean,
  u8,
  i8,
  f8_e4m3,
  f8_e5m2,
  u16,
  i16,
  f16,
  bf16,
  u32,
  i32,
  f32,
  u64,
  i64,
  f64,
  f4,       ///< MXFP4 E2M1, two to a byte
  f6_e2m3,  ///< MXFP6, four to three bytes
  f6_e3m2,
  f8_e8m0,
  f8_e4m3fnuz,
  f8_e5m2fnuz,
  c64,  ///< two F32s
};

/// The format's name: "BOOL", "U8", ..., "F8_E4M3", "BF16", "F64".
[[nodiscard]] PHX_EXPORT std::string_view to_string(Dtype dtype) noexcept;
/// Parses a format name; throws std::system_error(EINVAL) for others.
[[nodiscard]] PHX_EXPORT Dtype parse_dtype(std::string_view name);
/// Bits per element: 4 (F4) and 6 (F6_*) are packed, and a tensor of them
/// must fill whole bytes.
[[nodiscard]] PHX_EXPORT std::size_t bit_size(Dtype dtype) noexcept;
/// Whole bytes per element: bit_size / 8, 0 for the packed F4 and F6_*.
[[nodiscard]] PHX_EXPORT std::size_t element_size(Dtype dtype) noexcept;
/// Every dtype, in safetensors' own order (ascending alignment): its writer
/// places tensors by this order, last first, then by name.
[[nodiscard]] PHX_EXPORT std::span<const Dtype> all_dtypes() noexcept;

/// Headers longer than this are refused (EOVERFLOW): the format's own readers
/// use the same bound against hostile files.
inline constexpr std::uint64_t kMaxHeaderSize = std::uint64_t{100} << 20;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::u8;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;  ///< offset in the data section (after the header)
  std::uint64_t end = 0;
  [[nodiscard]] std::uint64_t size() const noexcept { return end - begin; }
};

/// One validated .safetensors file.
struct FileHeader {
  std::filesystem::path path;
  std::uint64_t file_size = 0;
  std::uint64_t header_size = 0;    ///< the JSON's length (the first 8 bytes, little endian)
  std::vector<TensorInfo> tensors;  ///< ascending data offsets
  std::map<std::string, std::string> metadata;  ///< "__metadata__"

  /// File offset of the data section.
  [[nodiscard]] std::uint64_t data_offset() const noexcept { return 8 + header_size; }
  /// nullptr when absent.
  [[nodiscard]] const TensorInfo *find(std::string_view name) const noexcept;
};

/// Reads and validates the header of @p path.  Throws std::system_error:
/// EINVAL (file shorter than 8 bytes, bad JSON, unknown dtype, shape not
/// matching the byte span, overlapping tensors, bad metadata), EOVERFLOW
/// (header length past the end of the file or above kMaxHeaderSize, offsets
/// past the data section, shape product overflowing), and open/read errors.
[[nodiscard]] PHX_EXPORT FileHeader read_header(const std::filesystem::path &path);
/// Validates a whole file held in memory (@p data: the 8-byte length, the
/// header, the data section), named @p path in errors: read_header's checks.
[[nodiscard]] PHX_EXPORT FileHeader parse_file(std::span<const std::byte> data,
                                               const std::filesystem::path &path);
/// Validates a header already read: @p json is the header text, @p file_size
/// the whole file's size (for the data section's bounds).
[[nodiscard]] PHX_EXPORT FileHeader parse_header(std::string_view json, std::uint64_t file_size,
                                                 const std::filesystem::path &path);

/// The .safetensors files a path stands for: the file itself; a
/// model.safetensors.index.json (its weight_map's files); a folder (its
/// index when it has one, else every *.safetensors in name order).
/// Throws std::system_error (ENOENT nothing to load, EINVAL bad index).
[[nodiscard]] PHX_EXPORT std::vector<std::filesystem::path> checkpoint_files(
    const std::filesystem::path &path);

/// A whole checkpoint: every tensor once.
struct Checkpoint {
  std::vector<FileHeader> files;
  [[nodiscard]] std::size_t tensor_count() const noexcept;
  /// Sum of the tensors' sizes.
  [[nodiscard]] std::uint64_t tensor_bytes() const noexcept;
};

/// Opens every path (file, folder or index) and validates all headers; a
/// tensor name in two files, or an index naming a tensor its file lacks,
/// is EINVAL.
[[nodiscard]] PHX_EXPORT Checkpoint open_checkpoint(std::span<const std::filesystem::path> paths);
[[nodiscard]] PHX_EXPORT Checkpoint open_checkpoint(const std::filesystem::path &path);

/// @p checkpoint narrowed to the tensors @p names names (files left with
/// none are dropped): what a caller that reads some tensors to one place
/// and the rest to another hands each Loader, so that no byte is read
/// twice.  A name no file holds is EINVAL.
[[nodiscard]] PHX_EXPORT Checkpoint select_tensors(Checkpoint checkpoint,
                                                   std::span<const std::string> names);

/// Which device each tensor goes to: the longest matching prefix (a prefix
/// matches a name equal to it or starting with it and a dot), else the
/// default.  {"model.layers.0": 0, "model.layers.1": 1, "lm_head": 1}.
struct DeviceMap {
  int default_device = 0;
  std::vector<std::pair<std::string, int>> prefixes;
  [[nodiscard]] PHX_EXPORT int device_for(std::string_view tensor_name) const;
  /// Parses "prefix=dev,prefix=dev,..." (a bare "dev" sets the default);
  /// throws std::system_error(EINVAL).
  [[nodiscard]] PHX_EXPORT static DeviceMap parse(std::string_view text, int default_device);
};

/// One destination allocation: the aligned superset of a file range that
/// covers the tensors of one file bound for one device.
struct Segment {
  std::size_t file = 0;  ///< index into Checkpoint::files
  int device = 0;
  std::uint64_t file_begin = 0;      ///< aligned file offset where the read starts
  std::uint64_t file_end = 0;        ///< aligned; may pass the end of the file
  std::vector<std::size_t> tensors;  ///< indices into FileHeader::tensors
  [[nodiscard]] std::uint64_t bytes() const noexcept { return file_end - file_begin; }
};

struct LoadPlan {
  std::size_t alignment = 0;
  std::vector<Segment> segments;  ///< grouped by file
  [[nodiscard]] std::uint64_t bytes() const noexcept;
};

/// How files are opened.
enum class CachePolicy {
  automatic,  ///< buffered when most of the file is in the page cache (mincore), else O_DIRECT
  direct,     ///< O_DIRECT where the filesystem has it (the direct engine needs it)
  buffered,   ///< through the page cache
};

/// How a compat GPU reads a cold (O_DIRECT) file into its pinned staging.
enum class ColdReader {
  automatic,  ///< by the rule: reader threads in stripes (docs/model-loading.md, "Cold files")
  threads,    ///< reader threads, one synchronous pread each at a time, one cursor in file order
  stripes,    ///< the same, each thread reading its own contiguous stripe of the requests
  uring,      ///< one io_uring ring on the stream's thread, cold_in_flight deep
};

/// Where and how to load.
struct LoadOptions {
  Engine engine = Engine::automatic;  ///< per device, as Device::open resolves it
  DeviceMap devices;
  CachePolicy cache = CachePolicy::automatic;
  /// Host engine: destination in pinned (page-locked) memory, so that a
  /// later copy to a GPU runs at full speed (needs a CUDA driver).
  bool pinned_host = false;
  /// The I/O shape of memory with a host view (direct, host engines):
  /// requests of chunk_size bytes, queue_depth of them in flight per file,
  /// parallel_files files at once.  A compat GPU's cold files take the
  /// cold shape instead (cold_reader, cold_request, cold_in_flight).
  std::size_t chunk_size = std::size_t{32} << 20;  ///< bytes per io_uring request
  unsigned queue_depth = 8;                        ///< requests in flight per file
  unsigned parallel_files = 4;                     ///< files read at the same time
  std::size_t alignment = 4096;                    ///< file and memory alignment of each segment
  /// A compat GPU's cold files: the reader, bytes per read and reads at
  /// once.  automatic / 0: the rule's (from the disk's queue limits and the
  /// core count; FileReadStats::why says which inputs); anything else forces
  /// that part of the shape.
  ColdReader cold_reader = ColdReader::automatic;
  std::size_t cold_request = 0;  ///< a multiple of alignment, at most 1 GiB
  unsigned cold_in_flight = 0;   ///< at most 1024
  /// Caller-supplied destination: returns memory of segment.device for
  /// segment.bytes() bytes (device memory for CUDA engines, host memory for
  /// the host engine), aligned to LoadOptions::alignment, which the caller
  /// owns and must keep until the LoadedCheckpoint is gone.  Unset: the
  /// loader allocates (cuMemAlloc, or aligned host memory for the host engine).
  std::function<void *(const Segment &segment)> allocate;
  /// Called on the calling thread about every 100 ms and at the end.
  std::function<void(std::uint64_t bytes_done, std::uint64_t bytes_total)> progress;
};

/// Plans the reads without touching any file.
[[nodiscard]] PHX_EXPORT LoadPlan plan_load(const Checkpoint &checkpoint,
                                            const LoadOptions &options);

/// Destination memory owned by the loader (freed when the last tensor
/// referring to it goes away).
class PHX_EXPORT Allocation {
 public:
  virtual ~Allocation();
  Allocation(const Allocation &) = delete;
  Allocation &operator=(const Allocation &) = delete;
  Allocation(Allocation &&) = delete;
  Allocation &operator=(Allocation &&) = delete;
  [[nodiscard]] std::byte *data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 protected:
  Allocation(std::byte *data, std::size_t size) noexcept : data_(data), size_(size) {}

 private:
  std::byte *data_;
  std::size_t size_;
};

enum class MemoryKind { host, cuda };

struct LoadedTensor {
  const TensorInfo *info = nullptr;  ///< points into LoadedCheckpoint::checkpoint
  int device = 0;                    ///< Phoenix device id
  int cuda_ordinal = -1;             ///< CUDA's ordinal of that GPU (cuda memory)
  MemoryKind memory = MemoryKind::host;
  std::byte *data = nullptr;          ///< device address (cuda) or host address
  std::shared_ptr<Allocation> owner;  ///< null for caller-supplied memory
};

/// How one file of a load was read, and why.
struct FileReadStats {
  std::filesystem::path path;
  std::uint64_t bytes = 0;  ///< tensor bytes of the file this load placed
  bool direct = false;      ///< O_DIRECT (else through the page cache)
  /// "readers": its GPU's reader threads, synchronous O_DIRECT reads into
  /// pinned staging (the cold shape's threads); "stream": its GPU's one
  /// stream of io_uring requests into pinned staging; "engine": File::read,
  /// the engine's own threads (the compat engine's copy threads); "queue":
  /// io_uring requests straight into memory the engine maps.
  std::string path_taken;
  std::size_t threads = 0;        ///< threads moving its bytes (at most)
  std::size_t request_bytes = 0;  ///< bytes per read request or chunk
  std::size_t depth = 0;          ///< requests in flight (at most)
  /// The fraction of its tensor bytes the page cache held when the load
  /// decided (-1 when the decision did not look).
  double resident = -1;
  std::string why;  ///< the decision in words
};

struct LoadStats {
  std::uint64_t bytes_read = 0;    ///< including alignment edges
  std::uint64_t tensor_bytes = 0;  ///< the tensors alone
  std::size_t files = 0;
  std::size_t files_direct = 0;  ///< of which read with O_DIRECT
  /// Of those, read by their GPU's cold reader (reader threads or one
  /// io_uring stream) into pinned staging (compat engine); the others
  /// through File::read.
  std::size_t files_streamed = 0;
  std::size_t segments = 0;
  double seconds = 0;  ///< from the first allocation to the last byte in place
  /// Of which allocating and registering the destinations (pinned host
  /// memory is slow to allocate; device memory is not).
  double allocate_seconds = 0;
  std::map<int, Engine> engines;        ///< per device
  std::vector<FileReadStats> per_file;  ///< checkpoint order
};

class PHX_EXPORT LoadedCheckpoint {
 public:
  Checkpoint checkpoint;
  std::vector<LoadedTensor> tensors;  ///< checkpoint order
  LoadStats stats;
  /// Throws std::system_error(ENOENT) naming the tensor.
  [[nodiscard]] const LoadedTensor &at(std::string_view name) const;
};

/// Loads checkpoints with one set of options, keeping its devices (and
/// their engines' threads and staging memory) open between loads.
class PHX_EXPORT Loader {
 public:
  /// Throws std::system_error(EINVAL) for a bad alignment, chunk size,
  /// queue depth or file count.
  explicit Loader(LoadOptions options);
  Loader(Loader &&) noexcept;
  Loader &operator=(Loader &&) noexcept;
  Loader(const Loader &) = delete;
  Loader &operator=(const Loader &) = delete;
  ~Loader();

  [[nodiscard]] const LoadOptions &options() const noexcept { return options_; }
  /// Replaces LoadOptions::progress for the next loads.
  void set_progress(std::function<void(std::uint64_t, std::uint64_t)> progress) {
    options_.progress = std::move(progress);
  }
  /// Opens @p device with the options' engine (once) and returns it.
  [[nodiscard]] Device &device(int device);
  /// Opens the devices @p checkpoint's tensors go to and moves one small
  /// read through each, so that engine setup (CUDA context, staging memory,
  /// threads) is not part of the next load.
  void warm_up(const Checkpoint &checkpoint);
  /// Loads every tensor.  Throws std::system_error or phx::IoError naming
  /// the file; nothing stays allocated after a failure.
  [[nodiscard]] std::shared_ptr<LoadedCheckpoint> load(Checkpoint checkpoint);

 private:
  /// The staging stream of compat device @p device (made once).
  detail::GatherMover &stream(int device, ColdReader reader, std::size_t request,
                              unsigned in_flight);

  LoadOptions options_;
  std::map<int, Device> devices_;
  std::map<int, std::unique_ptr<detail::GatherMover>> streams_;
  std::map<int, std::string> stream_shapes_;  ///< per device: the shape its stream was made for
};

/// Loader(options).load(checkpoint).
[[nodiscard]] PHX_EXPORT std::shared_ptr<LoadedCheckpoint> load(Checkpoint checkpoint,
                                                                const LoadOptions &options);

/// Copies a loaded tensor's bytes to host memory (@p dst holds
/// tensor.info->size() bytes).  Throws std::system_error.
PHX_EXPORT void copy_to_host(const LoadedTensor &tensor, std::span<std::byte> dst);

/// Allocates @p bytes of device memory on Phoenix device @p device (its
/// CUDA GPU's primary context), freed with the returned object.  Throws
/// std::system_error (ENODEV no GPU, ENOTSUP build without CUDA, ENOMEM).
[[nodiscard]] PHX_EXPORT std::shared_ptr<Allocation> allocate_cuda(int device, std::size_t bytes);
/// Pinned host memory (cuMemHostAlloc).  Throws std::system_error (ENODEV
/// without a CUDA driver, ENOTSUP build without CUDA).
[[nodiscard]] PHX_EXPORT std::shared_ptr<Allocation> allocate_pinned(std::size_t bytes);
/// Host memory aligned to @p alignment (a power of two), zeroed pages not
/// touched until used.
[[nodiscard]] PHX_EXPORT std::shared_ptr<Allocation> allocate_host(std::size_t bytes,
                                                                   std::size_t alignment);
/// phx::cuda_ordinal(@p device), kept here for the loaders that called it.
[[nodiscard]] PHX_EXPORT int cuda_ordinal(int device) noexcept;

}  // namespace phx::safetensors

#endif  // PHOENIX_SAFETENSORS_HPP
