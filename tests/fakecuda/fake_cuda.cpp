// SPDX-License-Identifier: MIT
// The CPU stand-in for the CUDA driver described in fake_cuda.h.  Entry
// points are declared here from the driver's documented ABI, the same way
// lib/cuda/driver_api.hpp declares what libphoenix calls.
#include "fake_cuda.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tsan_kernel_memory.hpp"  // libphoenix's: rings may reuse these addresses

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT(google-runtime-int): the ABI's type

namespace {

constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kOutOfMemory = 2;
constexpr CUresult kInvalidDevice = 101;
constexpr CUresult kInvalidContext = 201;
constexpr CUresult kInvalidHandle = 400;
constexpr CUresult kNotReady = 600;
constexpr CUresult kNotSupported = 801;
constexpr CUresult kHostMemoryAlreadyRegistered = 712;
constexpr CUresult kHostMemoryNotRegistered = 713;

constexpr int kMaxDevices = 8;
constexpr unsigned kMemoryTypeHost = 1;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr unsigned kWaitGeq = 0x0;
constexpr unsigned kWaitEq = 0x1;
constexpr unsigned kWaitAnd = 0x2;
constexpr unsigned kWaitFlush = 1U << 30;

struct StreamState;

}  // namespace

struct CUctx_st {
  int device = 0;
};

struct CUstream_st {
  std::shared_ptr<StreamState> state;
};

// CUmemcpyAttributes (cuda.h, CUDA 12.8+).
struct CUmemcpyAttributes_st {
  int src_access_order;  // CUmemcpySrcAccessOrder: 1 stream, 2 during the call, 3 any
  int src_location[2];   // CUmemLocation hints, ignored
  int dst_location[2];
  unsigned flags;
};

struct CUevent_st {
  std::mutex mutex;
  std::shared_ptr<StreamState> stream;  // null: never recorded (complete)
  std::uint64_t target = 0;
};

namespace {

// A stream: a worker thread that runs operations in order.
struct StreamState {
  explicit StreamState(CUctx_st *ctx) : context(ctx), worker([this] { run(); }) {}
  ~StreamState() {
    {
      const std::lock_guard lock(mutex);
      stop = true;
    }
    changed.notify_all();
    worker.join();  // after the queue drained
  }
  StreamState(const StreamState &) = delete;
  StreamState &operator=(const StreamState &) = delete;
  StreamState(StreamState &&) = delete;
  StreamState &operator=(StreamState &&) = delete;

  void push(std::function<void()> op) {
    {
      const std::lock_guard lock(mutex);
      ops.push_back(std::move(op));
      ++submitted;
    }
    changed.notify_all();
  }
  std::uint64_t mark() {
    const std::lock_guard lock(mutex);
    return submitted;
  }
  bool reached(std::uint64_t target) {
    const std::lock_guard lock(mutex);
    return completed >= target;
  }
  void wait(std::uint64_t target) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return completed >= target; });
  }
  bool wait_until(std::uint64_t target, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex);
    return changed.wait_until(lock, deadline, [&] { return completed >= target; });
  }
  void run();

  CUctx_st *context;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> ops;
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;
  bool stop = false;
  std::thread worker;  // last: started once the rest is built
};

struct DeviceAlloc {
  std::size_t size = 0;
  std::size_t mapped = 0;
  std::byte *alias = nullptr;
  int device = 0;
  unsigned long long id = 0;  // NOLINT(google-runtime-int): CU_POINTER_ATTRIBUTE_BUFFER_ID
};

struct HostAlloc {
  std::size_t size = 0;
  int device = 0;
  unsigned long long id = 0;  // NOLINT(google-runtime-int)
  bool registered = false;    // cuMemHostRegister's: the caller's memory, not ours
};

struct Globals {
  std::mutex mutex;
  int devices = 1;
  CUctx_st contexts[kMaxDevices];
  long retains[kMaxDevices] = {};
  std::map<std::uintptr_t, DeviceAlloc> device_allocs;
  std::map<std::uintptr_t, HostAlloc> host_allocs;
  std::map<std::size_t, std::vector<void *>> freed;  // reserved addresses by size
  long streams = 0;
  std::vector<std::weak_ptr<StreamState>> live_streams;  // cuStreamCreate's, for device-wide waits
  long sync_gave_up = 0;
  long events = 0;
  unsigned long long next_buffer_id = 1;  // NOLINT(google-runtime-int): never reused, as CUDA's
  std::atomic<long> copies{0};
  std::atomic<unsigned> op_delay_us{0};
  std::atomic<bool> batches_supported{true};
  std::atomic<long> copy_batches{0};
  struct Failure {
    unsigned nth = 0;
    int error = 0;
    unsigned delay_us = 0;
  };
  std::map<std::string, Failure> failures;  // by entry point
};

// Never destroyed: stream workers may still run while the process exits.
Globals &globals() {
  static auto *g = [] {
    auto *made = new Globals;  // NOLINT(cppcoreguidelines-owning-memory)
    if (const char *n = std::getenv("PHX_FAKE_CUDA_DEVICES"); n != nullptr) {  // NOLINT
      made->devices = std::clamp(std::atoi(n), 0, kMaxDevices);  // NOLINT(cert-err34-c)
    }
    for (int i = 0; i < kMaxDevices; ++i) {
      made->contexts[i].device = i;
    }
    return made;
  }();
  return *g;
}

void StreamState::run() {
  for (;;) {
    std::function<void()> op;
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return stop || !ops.empty(); });
      if (ops.empty()) {
        return;  // stopping, drained
      }
      op = std::move(ops.front());
      ops.pop_front();
    }
    if (const unsigned delay = globals().op_delay_us.load(); delay != 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(delay));
    }
    op();
    {
      const std::lock_guard lock(mutex);
      ++completed;
    }
    changed.notify_all();
  }
}

thread_local std::vector<CUctx_st *> context_stack;

CUctx_st *current_context() {
  return context_stack.empty() ? nullptr : context_stack.back();
}

// The legacy default stream (null, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD):
// one for all, never destroyed.
StreamState &default_stream() {
  static auto *s =
      new StreamState(&globals().contexts[0]);  // NOLINT(cppcoreguidelines-owning-memory)
  return *s;
}

StreamState &stream_of(CUstream_st *stream) {
  const auto handle = reinterpret_cast<std::uintptr_t>(stream);
  if (handle <= 2) {
    return default_stream();
  }
  return *stream->state;
}

// cuMemFreeHost, as cudaFreeHost, is an implicit synchronisation: it
// returns once the work already in every stream is done.  On a GPU a free
// on a thread that a stream is waiting for never returns; here the wait
// gives up after kSyncGiveUp and is counted (sync_gave_up), so that a test
// fails instead of hanging.
constexpr auto kSyncGiveUp = std::chrono::seconds(20);

void wait_for_every_stream() {
  Globals &g = globals();
  std::vector<std::shared_ptr<StreamState>> streams;
  {
    const std::lock_guard lock(g.mutex);
    for (const auto &w : g.live_streams) {
      if (auto s = w.lock()) {
        streams.push_back(std::move(s));
      }
    }
  }
  std::vector<std::pair<StreamState *, std::uint64_t>> marks;
  marks.emplace_back(&default_stream(), default_stream().mark());
  for (const auto &s : streams) {
    marks.emplace_back(s.get(), s->mark());
  }
  const auto deadline = std::chrono::steady_clock::now() + kSyncGiveUp;
  for (const auto &[stream, target] : marks) {
    if (!stream->wait_until(target, deadline)) {
      const std::lock_guard lock(g.mutex);
      ++g.sync_gave_up;
    }
  }
}

CUresult injected(const char *call) {
  Globals &g = globals();
  Globals::Failure failure;
  {
    const std::lock_guard lock(g.mutex);
    const auto it = g.failures.find(call);
    if (it == g.failures.end() || it->second.nth == 0 || --it->second.nth != 0) {
      return kSuccess;
    }
    failure = it->second;
  }
  if (failure.delay_us != 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(failure.delay_us));
  }
  return failure.error;
}

// The alias of [address, address + size) when it lies in one device
// allocation, else null.  Caller holds no lock.
std::byte *device_alias(CUdeviceptr address, std::size_t size) {
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  auto it = g.device_allocs.upper_bound(static_cast<std::uintptr_t>(address));
  if (it == g.device_allocs.begin()) {
    return nullptr;
  }
  --it;
  const std::uintptr_t offset = static_cast<std::uintptr_t>(address) - it->first;
  if (offset > it->second.size || size > it->second.size - offset) {
    return nullptr;
  }
  return it->second.alias + offset;
}

template <typename Map>
typename Map::iterator containing(Map &map, std::uintptr_t address) {
  auto it = map.upper_bound(address);
  if (it == map.begin()) {
    return map.end();
  }
  --it;
  return address - it->first < it->second.size ? it : map.end();
}

std::uint32_t *host_word(CUdeviceptr address) {
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  auto it = containing(g.host_allocs, static_cast<std::uintptr_t>(address));
  if (it == g.host_allocs.end() || address % 4 != 0 ||
      static_cast<std::uintptr_t>(address) + 4 > it->first + it->second.size) {
    return nullptr;
  }
  return reinterpret_cast<std::uint32_t *>(static_cast<std::uintptr_t>(address));  // NOLINT
}

}  // namespace

extern "C" {

// NOLINTBEGIN(readability-identifier-naming,cppcoreguidelines-pro-type-reinterpret-cast)

CUresult cuInit(unsigned /*flags*/) {
  return kSuccess;
}

CUresult cuDriverGetVersion(int *version) {
  if (version == nullptr) {
    return kInvalidValue;
  }
  *version = 13000;
  return kSuccess;
}

CUresult cuGetErrorName(CUresult error, const char **text) {
  if (text == nullptr) {
    return kInvalidValue;
  }
  switch (error) {
    case kSuccess:
      *text = "CUDA_SUCCESS";
      break;
    case kInvalidValue:
      *text = "CUDA_ERROR_INVALID_VALUE";
      break;
    case kOutOfMemory:
      *text = "CUDA_ERROR_OUT_OF_MEMORY";
      break;
    case kInvalidDevice:
      *text = "CUDA_ERROR_INVALID_DEVICE";
      break;
    case kInvalidContext:
      *text = "CUDA_ERROR_INVALID_CONTEXT";
      break;
    case kInvalidHandle:
      *text = "CUDA_ERROR_INVALID_HANDLE";
      break;
    case kNotReady:
      *text = "CUDA_ERROR_NOT_READY";
      break;
    default:
      *text = "CUDA_ERROR_UNKNOWN";
      break;
  }
  return kSuccess;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
  if (text == nullptr) {
    return kInvalidValue;
  }
  *text = error == kSuccess ? "no error" : "error injected or detected by the fake CUDA driver";
  return kSuccess;
}

CUresult cuDeviceGetCount(int *count) {
  if (count == nullptr) {
    return kInvalidValue;
  }
  *count = globals().devices;
  return kSuccess;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (device == nullptr) {
    return kInvalidValue;
  }
  if (ordinal < 0 || ordinal >= globals().devices) {
    return kInvalidDevice;
  }
  *device = ordinal;
  return kSuccess;
}

CUresult cuDeviceGetPCIBusId(char *bus, int length, CUdevice device) {
  if (bus == nullptr || length < 13) {
    return kInvalidValue;
  }
  if (device < 0 || device >= globals().devices) {
    return kInvalidDevice;
  }
  // Bus numbers descend with the ordinal: libphoenix must sort by bus.
  (void)std::snprintf(bus, static_cast<std::size_t>(length), "0000:%02X:00.0", 0xC0 - device);
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRetain(CUctx_st **context, CUdevice device) {
  Globals &g = globals();
  if (context == nullptr) {
    return kInvalidValue;
  }
  if (device < 0 || device >= g.devices) {
    return kInvalidDevice;
  }
  const std::lock_guard lock(g.mutex);
  ++g.retains[device];
  *context = &g.contexts[device];
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  Globals &g = globals();
  if (device < 0 || device >= g.devices) {
    return kInvalidDevice;
  }
  const std::lock_guard lock(g.mutex);
  if (g.retains[device] == 0) {
    return kInvalidContext;
  }
  --g.retains[device];
  return kSuccess;
}

CUresult cuCtxPushCurrent_v2(CUctx_st *context) {
  if (context == nullptr) {
    return kInvalidContext;
  }
  context_stack.push_back(context);
  return kSuccess;
}

CUresult cuCtxPopCurrent_v2(CUctx_st **context) {
  if (context_stack.empty()) {
    return kInvalidContext;
  }
  if (context != nullptr) {
    *context = context_stack.back();
  }
  context_stack.pop_back();
  return kSuccess;
}

CUresult cuCtxSetCurrent(CUctx_st *context) {
  if (context == nullptr) {
    if (!context_stack.empty()) {
      context_stack.pop_back();
    }
  } else if (context_stack.empty()) {
    context_stack.push_back(context);
  } else {
    context_stack.back() = context;
  }
  return kSuccess;
}

CUresult cuCtxGetCurrent(CUctx_st **context) {
  if (context == nullptr) {
    return kInvalidValue;
  }
  *context = current_context();
  return kSuccess;
}

CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr pointer) {
  if (data == nullptr) {
    return kInvalidValue;
  }
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  const auto address = static_cast<std::uintptr_t>(pointer);
  unsigned type = 0;
  std::uintptr_t start = 0;
  std::size_t size = 0;
  int device = 0;
  unsigned long long id = 0;  // NOLINT(google-runtime-int)
  if (auto d = containing(g.device_allocs, address); d != g.device_allocs.end()) {
    type = kMemoryTypeDevice;
    start = d->first;
    size = d->second.size;
    device = d->second.device;
    id = d->second.id;
  } else if (auto h = containing(g.host_allocs, address); h != g.host_allocs.end()) {
    type = kMemoryTypeHost;
    start = h->first;
    size = h->second.size;
    device = h->second.device;
    id = h->second.id;
  } else {
    return kInvalidValue;  // as the driver says of memory it does not know
  }
  switch (attribute) {
    case 1:
      *static_cast<CUctx_st **>(data) = &g.contexts[device];
      break;  // CONTEXT
    case 2:
      *static_cast<unsigned *>(data) = type;
      break;  // MEMORY_TYPE
    case 6:
      *static_cast<unsigned *>(data) = 1;
      break;  // SYNC_MEMOPS
    case 7:
      *static_cast<unsigned long long *>(data) = id;  // NOLINT(google-runtime-int)
      break;                                          // BUFFER_ID
    case 8:
      *static_cast<unsigned *>(data) = 0;
      break;  // IS_MANAGED
    case 9:
      *static_cast<int *>(data) = device;
      break;  // DEVICE_ORDINAL
    case 11:
      *static_cast<CUdeviceptr *>(data) = start;
      break;  // RANGE_START_ADDR
    case 12:
      *static_cast<std::size_t *>(data) = size;
      break;  // RANGE_SIZE
    default:
      return kInvalidValue;
  }
  return kSuccess;
}

CUresult cuPointerSetAttribute(const void *value, int attribute, CUdeviceptr pointer) {
  if (value == nullptr || attribute != 6) {
    return kInvalidValue;
  }
  return device_alias(pointer, 1) != nullptr ? kSuccess : kInvalidValue;
}

CUresult cuMemAlloc_v2(CUdeviceptr *pointer, std::size_t size) {
  if (pointer == nullptr || size == 0) {
    return kInvalidValue;
  }
  CUctx_st *ctx = current_context();
  if (ctx == nullptr) {
    return kInvalidContext;
  }
  if (const CUresult r = injected("cuMemAlloc"); r != kSuccess) {
    return r;
  }
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t mapped = (size + page - 1) / page * page;
  Globals &g = globals();
  // The newest freed address of this size first, as caching allocators
  // (PyTorch's) hand freed memory out again.
  void *reuse = nullptr;
  {
    const std::lock_guard lock(g.mutex);
    if (auto it = g.freed.find(mapped); it != g.freed.end() && !it->second.empty()) {
      reuse = it->second.back();
      it->second.pop_back();
    }
  }
  const int fd = ::memfd_create("fake-cuda-device-memory", MFD_CLOEXEC);
  void *device = MAP_FAILED;
  void *alias = MAP_FAILED;
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(mapped)) == 0) {
    device =
        ::mmap(reuse, mapped, PROT_NONE, MAP_SHARED | (reuse != nullptr ? MAP_FIXED : 0), fd, 0);
    alias = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (fd >= 0) {
    ::close(fd);
  }
  if (device == MAP_FAILED || alias == MAP_FAILED) {
    if (device != MAP_FAILED) {
      (void)phx::detail::munmap_ordered(device, mapped);
    }
    if (alias != MAP_FAILED) {
      (void)phx::detail::munmap_ordered(alias, mapped);
    }
    return kOutOfMemory;
  }
  const std::lock_guard lock(g.mutex);
  g.device_allocs[reinterpret_cast<std::uintptr_t>(device)] =
      DeviceAlloc{size, mapped, static_cast<std::byte *>(alias), ctx->device, g.next_buffer_id++};
  *pointer = reinterpret_cast<std::uintptr_t>(device);
  return kSuccess;
}

CUresult cuMemFree_v2(CUdeviceptr pointer) {
  Globals &g = globals();
  DeviceAlloc a;
  {
    const std::lock_guard lock(g.mutex);
    auto it = g.device_allocs.find(static_cast<std::uintptr_t>(pointer));
    if (it == g.device_allocs.end()) {
      return kInvalidValue;
    }
    a = it->second;
    g.device_allocs.erase(it);
  }
  // The address stays reserved (no access) for a later allocation.
  void *device = reinterpret_cast<void *>(static_cast<std::uintptr_t>(pointer));  // NOLINT
  if (::mmap(device, a.mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0) != MAP_FAILED) {
    const std::lock_guard lock(g.mutex);
    g.freed[a.mapped].push_back(device);
  }
  (void)phx::detail::munmap_ordered(a.alias, a.mapped);
  return kSuccess;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr destination, const void *source, std::size_t size) {
  std::byte *to = device_alias(destination, size);
  if (to == nullptr || source == nullptr) {
    return kInvalidValue;
  }
  std::memcpy(to, source, size);
  return kSuccess;
}

CUresult cuMemcpyDtoH_v2(void *destination, CUdeviceptr source, std::size_t size) {
  const std::byte *from = device_alias(source, size);
  if (from == nullptr || destination == nullptr) {
    return kInvalidValue;
  }
  std::memcpy(destination, from, size);
  return kSuccess;
}

CUresult cuMemHostAlloc(void **pointer, std::size_t size, unsigned /*flags*/) {
  if (pointer == nullptr || size == 0) {
    return kInvalidValue;
  }
  CUctx_st *ctx = current_context();
  if (ctx == nullptr) {
    return kInvalidContext;
  }
  if (const CUresult r = injected("cuMemHostAlloc"); r != kSuccess) {
    return r;
  }
  void *p =
      std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);  // NOLINT(cppcoreguidelines-no-malloc)
  if (p == nullptr) {
    return kOutOfMemory;
  }
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  g.host_allocs[reinterpret_cast<std::uintptr_t>(p)] =
      HostAlloc{size, ctx->device, g.next_buffer_id++};
  *pointer = p;
  return kSuccess;
}

CUresult cuMemFreeHost(void *pointer) {
  Globals &g = globals();
  if (const CUresult r = injected("cuMemFreeHost"); r != kSuccess) {
    return r;
  }
  wait_for_every_stream();
  {
    const std::lock_guard lock(g.mutex);
    auto it = g.host_allocs.find(reinterpret_cast<std::uintptr_t>(pointer));
    if (it == g.host_allocs.end() || it->second.registered) {
      return kInvalidValue;
    }
    g.host_allocs.erase(it);
  }
  std::free(pointer);  // NOLINT(cppcoreguidelines-no-malloc)
  return kSuccess;
}

// As the driver: page-aligned ranges not yet registered or allocated, and
// the memory must be there (each page is read, so an unmapped one faults
// the test as the driver's pinning would fail).
CUresult cuMemHostRegister_v2(void *pointer, std::size_t size, unsigned /*flags*/) {
  const auto start = reinterpret_cast<std::uintptr_t>(pointer);
  if (pointer == nullptr || size == 0 || start % 4096 != 0) {
    return kInvalidValue;
  }
  CUctx_st *ctx = current_context();
  if (ctx == nullptr) {
    return kInvalidContext;
  }
  if (const CUresult r = injected("cuMemHostRegister_v2"); r != kSuccess) {
    return r;
  }
  for (std::size_t at = 0; at < size; at += 4096) {
    (void)*static_cast<volatile const std::byte *>(static_cast<std::byte *>(pointer) + at);
  }
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  auto after = g.host_allocs.lower_bound(start);
  if ((after != g.host_allocs.end() && after->first < start + size) ||
      containing(g.host_allocs, start) != g.host_allocs.end()) {
    return kHostMemoryAlreadyRegistered;
  }
  g.host_allocs[start] = HostAlloc{size, ctx->device, g.next_buffer_id++, true};
  return kSuccess;
}

CUresult cuMemHostUnregister(void *pointer) {
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  auto it = g.host_allocs.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (it == g.host_allocs.end() || !it->second.registered) {
    return kHostMemoryNotRegistered;
  }
  g.host_allocs.erase(it);
  return kSuccess;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *device, void *host, unsigned flags) {
  if (device == nullptr || flags != 0) {
    return kInvalidValue;
  }
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  if (containing(g.host_allocs, reinterpret_cast<std::uintptr_t>(host)) == g.host_allocs.end()) {
    return kInvalidValue;
  }
  *device = reinterpret_cast<std::uintptr_t>(host);  // unified addressing: the same address
  return kSuccess;
}

CUresult cuStreamCreate(CUstream_st **stream, unsigned /*flags*/) {
  if (stream == nullptr) {
    return kInvalidValue;
  }
  CUctx_st *ctx = current_context();
  if (ctx == nullptr) {
    return kInvalidContext;
  }
  auto *made = new CUstream_st{std::make_shared<StreamState>(ctx)};  // NOLINT
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  ++g.streams;
  std::erase_if(g.live_streams, [](const auto &w) { return w.expired(); });
  g.live_streams.push_back(made->state);
  *stream = made;
  return kSuccess;
}

CUresult cuStreamDestroy_v2(CUstream_st *stream) {
  if (reinterpret_cast<std::uintptr_t>(stream) <= 2) {
    return kInvalidHandle;
  }
  delete stream;  // NOLINT(cppcoreguidelines-owning-memory): the state drains first
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  --g.streams;
  return kSuccess;
}

CUresult cuStreamSynchronize(CUstream_st *stream) {
  StreamState &s = stream_of(stream);
  s.wait(s.mark());
  return kSuccess;
}

CUresult cuStreamGetCtx(CUstream_st *stream, CUctx_st **context) {
  if (context == nullptr) {
    return kInvalidValue;
  }
  if (reinterpret_cast<std::uintptr_t>(stream) <= 2) {
    *context = current_context();
    return *context != nullptr ? kSuccess : kInvalidContext;
  }
  *context = stream->state->context;
  return kSuccess;
}

CUresult cuStreamIsCapturing(CUstream_st * /*stream*/, int *status) {
  if (status == nullptr) {
    return kInvalidValue;
  }
  *status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
  return kSuccess;
}

CUresult cuStreamWaitValue32_v2(CUstream_st *stream, CUdeviceptr address, std::uint32_t value,
                                unsigned flags) {
  std::uint32_t *word = host_word(address);
  const unsigned how = flags & ~kWaitFlush;
  if (word == nullptr || (how != kWaitGeq && how != kWaitEq && how != kWaitAnd)) {
    return kInvalidValue;
  }
  if (const CUresult r = injected("cuStreamWaitValue32"); r != kSuccess) {
    return r;
  }
  stream_of(stream).push([word, value, how] {
    const std::atomic_ref<std::uint32_t> w(*word);
    for (;;) {
      const std::uint32_t now = w.load(std::memory_order_acquire);
      const bool met = how == kWaitGeq  ? static_cast<std::int32_t>(now - value) >= 0
                       : how == kWaitEq ? now == value
                                        : (now & value) != 0;
      if (met) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  return kSuccess;
}

CUresult cuStreamWriteValue32_v2(CUstream_st *stream, CUdeviceptr address, std::uint32_t value,
                                 unsigned /*flags*/) {
  std::uint32_t *word = host_word(address);
  if (word == nullptr) {
    return kInvalidValue;
  }
  stream_of(stream).push([word, value] {
    std::atomic_ref<std::uint32_t>(*word).store(value, std::memory_order_release);
  });
  return kSuccess;
}

CUresult cuLaunchHostFunc(CUstream_st *stream, void (*fn)(void *), void *data) {
  if (fn == nullptr) {
    return kInvalidValue;
  }
  stream_of(stream).push([fn, data] { fn(data); });
  return kSuccess;
}

CUresult cuEventCreate(CUevent_st **event, unsigned /*flags*/) {
  if (event == nullptr) {
    return kInvalidValue;
  }
  if (current_context() == nullptr) {
    return kInvalidContext;
  }
  *event = new CUevent_st;  // NOLINT(cppcoreguidelines-owning-memory)
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  ++g.events;
  return kSuccess;
}

CUresult cuEventDestroy_v2(CUevent_st *event) {
  if (event == nullptr) {
    return kInvalidHandle;
  }
  delete event;  // NOLINT(cppcoreguidelines-owning-memory)
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  --g.events;
  return kSuccess;
}

CUresult cuEventRecord(CUevent_st *event, CUstream_st *stream) {
  if (event == nullptr) {
    return kInvalidHandle;
  }
  if (const CUresult r = injected("cuEventRecord"); r != kSuccess) {
    return r;
  }
  std::shared_ptr<StreamState> state;
  if (reinterpret_cast<std::uintptr_t>(stream) > 2) {
    state = stream->state;
  } else {
    state = std::shared_ptr<StreamState>(&default_stream(), [](StreamState *) {});
  }
  const std::uint64_t target = state->mark();
  const std::lock_guard lock(event->mutex);
  event->stream = std::move(state);
  event->target = target;
  return kSuccess;
}

CUresult cuEventQuery(CUevent_st *event) {
  if (event == nullptr) {
    return kInvalidHandle;
  }
  std::shared_ptr<StreamState> stream;
  std::uint64_t target = 0;
  {
    const std::lock_guard lock(event->mutex);
    stream = event->stream;
    target = event->target;
  }
  return stream == nullptr || stream->reached(target) ? kSuccess : kNotReady;
}

CUresult cuEventSynchronize(CUevent_st *event) {
  if (event == nullptr) {
    return kInvalidHandle;
  }
  if (const CUresult r = injected("cuEventSynchronize"); r != kSuccess) {
    return r;
  }
  std::shared_ptr<StreamState> stream;
  std::uint64_t target = 0;
  {
    const std::lock_guard lock(event->mutex);
    stream = event->stream;
    target = event->target;
  }
  if (stream != nullptr) {
    stream->wait(target);
  }
  return kSuccess;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr destination, const void *source, std::size_t size,
                              CUstream_st *stream) {
  std::byte *to = device_alias(destination, size);
  if (to == nullptr || source == nullptr) {
    return kInvalidValue;
  }
  if (const CUresult r = injected("cuMemcpyHtoDAsync"); r != kSuccess) {
    return r;
  }
  stream_of(stream).push([to, source, size] {
    std::memcpy(to, source, size);
    globals().copies.fetch_add(1);
  });
  return kSuccess;
}

CUresult cuMemcpyDtoHAsync_v2(void *destination, CUdeviceptr source, std::size_t size,
                              CUstream_st *stream) {
  const std::byte *from = device_alias(source, size);
  if (from == nullptr || destination == nullptr) {
    return kInvalidValue;
  }
  if (const CUresult r = injected("cuMemcpyDtoHAsync"); r != kSuccess) {
    return r;
  }
  stream_of(stream).push([destination, from, size] {
    std::memcpy(destination, from, size);
    globals().copies.fetch_add(1);
  });
  return kSuccess;
}

// Checked as strictly as the documentation states: a non-null stream that
// is not the legacy one, attributes that start at copy 0 and rise, a valid
// source order for each; every copy between pinned or pageable host memory
// and one device allocation.  The copies run in reverse order, since a
// batch promises none: a caller that depends on their order sees it.
CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, std::size_t *sizes,
                               std::size_t count, CUmemcpyAttributes_st *attrs,
                               std::size_t *attr_indices, std::size_t attr_count,
                               CUstream_st *stream) {
  if (!globals().batches_supported.load()) {
    return kNotSupported;  // as a driver whose GPU or platform lacks batched copies
  }
  if (reinterpret_cast<std::uintptr_t>(stream) <= 1 || count == 0 || dsts == nullptr ||
      srcs == nullptr || sizes == nullptr || attrs == nullptr || attr_indices == nullptr ||
      attr_count == 0 || attr_count > count || attr_indices[0] != 0) {
    return kInvalidValue;
  }
  for (std::size_t a = 0; a < attr_count; ++a) {
    if ((a > 0 && attr_indices[a] <= attr_indices[a - 1]) || attr_indices[a] >= count ||
        attrs[a].src_access_order < 1 || attrs[a].src_access_order > 3) {
      return kInvalidValue;
    }
  }
  struct Planned {
    std::byte *to;
    const std::byte *from;
    std::size_t size;
  };
  std::vector<Planned> planned;
  planned.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (std::byte *to = device_alias(dsts[i], sizes[i]); to != nullptr) {
      planned.push_back({to, reinterpret_cast<const std::byte *>(srcs[i]), sizes[i]});
    } else if (const std::byte *from = device_alias(srcs[i], sizes[i]); from != nullptr) {
      planned.push_back({reinterpret_cast<std::byte *>(dsts[i]), from, sizes[i]});
    } else {
      return kInvalidValue;
    }
    if (planned.back().to == nullptr || planned.back().from == nullptr) {
      return kInvalidValue;
    }
  }
  if (const CUresult r = injected("cuMemcpyBatchAsync"); r != kSuccess) {
    return r;
  }
  globals().copy_batches.fetch_add(1);
  stream_of(stream).push([planned = std::move(planned)] {
    for (auto it = planned.rbegin(); it != planned.rend(); ++it) {
      std::memcpy(it->to, it->from, it->size);
      globals().copies.fetch_add(1);
    }
  });
  return kSuccess;
}

// -- the control API (fake_cuda.h) ----------------------------------------------------------

void phx_fake_cuda_get_counts(struct phx_fake_cuda_counts *out) {
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  out->streams = g.streams;
  out->sync_gave_up = g.sync_gave_up;
  out->events = g.events;
  out->device_allocs = static_cast<long>(g.device_allocs.size());
  out->host_allocs = static_cast<long>(g.host_allocs.size());
  out->host_registered = 0;
  for (const auto &[address, alloc] : g.host_allocs) {
    out->host_registered += alloc.registered ? 1 : 0;
  }
  out->contexts = 0;
  for (const long r : g.retains) {
    out->contexts += r;
  }
  out->copies = g.copies.load();
  out->copy_batches = g.copy_batches.load();
}

void phx_fake_cuda_set_batches_supported(int supported) {
  globals().batches_supported.store(supported != 0);
}

void phx_fake_cuda_set_op_delay_us(unsigned delay_us) {
  globals().op_delay_us.store(delay_us);
}

void phx_fake_cuda_fail_call(const char *call, unsigned nth, int error) {
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  g.failures[call] = {nth, error, 0};
}

void phx_fake_cuda_fail_call_after(const char *call, unsigned nth, int error, unsigned delay_us) {
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  g.failures[call] = {nth, error, delay_us};
}

void phx_fake_cuda_clear_failures(void) {
  Globals &g = globals();
  const std::lock_guard lock(g.mutex);
  g.failures.clear();
}

int phx_fake_cuda_enqueue_fill(struct CUstream_st *stream, unsigned long long dptr,  // NOLINT
                               size_t size, uint8_t value, unsigned delay_us) {
  std::byte *to = device_alias(dptr, size);
  if (to == nullptr) {
    return kInvalidValue;
  }
  stream_of(stream).push([to, size, value, delay_us] {
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    std::memset(to, value, size);
  });
  return kSuccess;
}

// NOLINTEND(readability-identifier-naming,cppcoreguidelines-pro-type-reinterpret-cast)

}  // extern "C"
