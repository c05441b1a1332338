// SPDX-License-Identifier: MIT
#include "io.hpp"

#include <fcntl.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <shared_mutex>
#include <system_error>
#include <utility>
#include <vector>

#include "buffer.hpp"
#include "errors.hpp"
#include "int_arg.hpp"
#include "phoenix/phoenix.hpp"
#include "phoenix/safetensors.hpp"
#include "registry.hpp"

namespace py = pybind11;

namespace phx::python {

int device_for_ordinal(int ordinal) {
  for (int id = 0; id < 64; ++id) {
    const int o = safetensors::cuda_ordinal(id);
    if (o < 0) {
      break;
    }
    if (o == ordinal) {
      return id;
    }
  }
  throw std::system_error(ENODEV, std::system_category(),
                          "no CUDA GPU with ordinal " + std::to_string(ordinal));
}

Target parse_target(const std::string &device) {
  if (device == "cpu") {
    return {false, 0, 0};
  }
  if (device == "cuda") {
    return {true, device_for_ordinal(0), 0};
  }
  if (device.starts_with("cuda:")) {
    std::size_t used = 0;
    int ordinal = -1;
    try {
      ordinal = std::stoi(device.substr(5), &used);
    } catch (const std::exception &) {
      used = 0;
    }
    if (used == device.size() - 5 && ordinal >= 0) {
      return {true, device_for_ordinal(ordinal), ordinal};
    }
  }
  throw ArgumentError(R"(device ")" + device +
                      R"(": expected "cpu", "cuda", "cuda:N" or a CUDA ordinal N)");
}

std::string device_name(const py::handle &device) {
  if (py::isinstance<py::str>(device)) {
    return py::cast<std::string>(device);
  }
  if (PyLong_Check(device.ptr()) != 0 && PyBool_Check(device.ptr()) == 0) {
    const auto ordinal = py::reinterpret_borrow<py::int_>(device);
    if (ordinal < py::int_(0) || ordinal > py::int_(std::numeric_limits<int>::max())) {
      throw ArgumentError("device " + text(device) + ": a CUDA ordinal is 0 or more");
    }
    return "cuda:" + text(device);
  }
  // torch.device("cuda", 1) prints as "cuda:1".
  if (py::hasattr(device, "type") && py::hasattr(device, "index")) {
    return text(device);
  }
  throw ArgumentError("device " + std::string(py::repr(device)) +
                      R"(: expected "cpu", "cuda", "cuda:N" or a CUDA ordinal N)");
}

phx::Engine engine_arg(const py::handle &engine, const std::string &what) {
  if (!py::isinstance<py::str>(engine)) {
    throw ArgumentError(what + " " + std::string(py::repr(engine)) +
                        ": expected auto, direct, compat, cufile or host");
  }
  try {
    return phx::parse_engine(py::cast<std::string>(engine));
  } catch (const std::system_error &e) {
    throw ArgumentError(what + " \"" + py::cast<std::string>(engine) +
                        "\": expected auto, direct, compat, cufile or host");
  }
}

namespace {

std::string place_text(Place p) {
  return p.cuda ? "cuda:" + std::to_string(p.ordinal) : std::string("cpu");
}

Range range_of(const std::byte *data, std::size_t size) {
  return {reinterpret_cast<std::uintptr_t>(data), size};  // NOLINT
}

// One explicit registration: the entry in its device's table, and the
// object whose memory it is, kept alive until close().
struct RegState {
  std::shared_ptr<DeviceEntry> device;
  std::shared_ptr<RegEntry> entry;
  std::unique_ptr<Buffer> buffer;
  py::object object;
  Range range;
  Place place;

  [[nodiscard]] bool closed() const noexcept { return entry == nullptr; }
  void close() {
    if (entry) {
      {
        const py::gil_scoped_release release;
        device->close(entry);
      }
      entry.reset();
      device.reset();
      buffer.reset();
      object = py::none();
    }
  }
  RegState() = default;
  RegState(const RegState &) = delete;
  RegState &operator=(const RegState &) = delete;
  RegState(RegState &&) = delete;
  RegState &operator=(RegState &&) = delete;
  ~RegState() {
    if (entry) {
      device->close(entry);
    }
  }
};

class PyRegistration {
 public:
  explicit PyRegistration(std::shared_ptr<RegState> state) : state_(std::move(state)) {}
  void close() { state_->close(); }
  [[nodiscard]] bool closed() const noexcept { return state_->closed(); }
  [[nodiscard]] std::uintptr_t ptr() const {
    check();
    return state_->range.start;
  }
  [[nodiscard]] std::size_t nbytes() const {
    check();
    return state_->range.size;
  }
  [[nodiscard]] std::string device() const { return place_text(state_->place); }
  [[nodiscard]] py::object buffer() const {
    check();
    return state_->object;
  }

 private:
  void check() const {
    if (state_->closed()) {
      throw py::value_error("Registration is closed");
    }
  }
  std::shared_ptr<RegState> state_;
};

class PyDevice {
 public:
  PyDevice(const py::object &target, const py::object &engine_name,
           const std::optional<phx::Options> &options)
      : name_(device_name(target)), target_(parse_target(name_)) {
    phx::Engine e = engine_arg(engine_name, "Device: engine");
    const std::string engine(phx::to_string(e));
    if (options && e == phx::Engine::automatic) {
      e = options->engine;
    } else if (options && options->engine != phx::Engine::automatic && options->engine != e) {
      throw ArgumentError("Device: engine=\"" + engine + "\" but options.engine is \"" +
                          std::string(phx::to_string(options->engine)) + "\"");
    }
    if (!target_.cuda && e != phx::Engine::automatic && e != phx::Engine::host) {
      throw ArgumentError("device cpu: engine \"" + engine +
                          "\" cannot serve host memory (use host)");
    }
    const py::gil_scoped_release release;
    entry_ = device_entry(target_.device, e, !target_.cuda, options ? &*options : nullptr);
    id_ = entry_->device().id();
    engine_ = std::string(phx::to_string(entry_->device().engine()));
    reason_ = entry_->device().engine_reason();
    options_ = entry_->device().options();
  }

  PyRegistration register_buffer(const py::object &object) {
    check();
    auto state = std::make_shared<RegState>();
    state->buffer = std::make_unique<Buffer>(object, false);
    state->place = state->buffer->place();
    const Place mine{target_.cuda, target_.cuda ? target_.ordinal : 0};
    if (state->place != mine) {
      throw py::value_error("register: the buffer is on " + place_text(state->place) +
                            ", this Device is " + name_);
    }
    if (state->buffer->nbytes() == 0) {
      throw py::value_error("register: the buffer is empty");
    }
    state->range = range_of(state->buffer->data(), state->buffer->nbytes());
    state->object = object;
    state->device = entry_;
    {
      const py::gil_scoped_release release;
      state->entry = entry_->open(state->range);
    }
    regs_.push_back(state);
    return PyRegistration(std::move(state));
  }

  void close() {
    for (const auto &weak : regs_) {
      if (const auto state = weak.lock()) {
        state->close();
      }
    }
    regs_.clear();
    if (entry_) {
      registered_at_close_ = entry_->registered_total();
    }
    // A closed Device no longer holds the engine: release_idle_engines()
    // may stop it once nothing else does.
    entry_.reset();
    closed_ = true;
  }
  [[nodiscard]] bool closed() const noexcept { return closed_; }
  [[nodiscard]] int id() const noexcept { return id_; }
  [[nodiscard]] const std::string &engine() const noexcept { return engine_; }
  [[nodiscard]] const std::string &reason() const noexcept { return reason_; }
  [[nodiscard]] phx::Options options() const { return options_; }
  [[nodiscard]] const std::string &name() const noexcept { return name_; }
  [[nodiscard]] py::dict stats() const {
    py::dict d;
    d["live"] = entry_ ? entry_->count() : 0;
    d["registered"] = entry_ ? entry_->registered_total() : registered_at_close_;
    return d;
  }

 private:
  void check() const {
    if (closed_) {
      throw py::value_error("Device " + name_ + " is closed");
    }
  }
  std::string name_;
  Target target_;
  std::shared_ptr<DeviceEntry> entry_;  // null once closed
  int id_ = 0;
  std::string engine_;
  std::string reason_;
  phx::Options options_;
  std::uint64_t registered_at_close_ = 0;
  std::vector<std::weak_ptr<RegState>> regs_;
  bool closed_ = false;
};

// The registrations one I/O (or batch) uses, given back when it ends.
class Lease {
 public:
  Lease() = default;
  Lease(const Lease &) = delete;
  Lease &operator=(const Lease &) = delete;
  Lease(Lease &&) = delete;
  Lease &operator=(Lease &&) = delete;
  ~Lease() {
    for (auto &[entry, uses] : held_) {
      entry->release(uses);
    }
  }
  std::vector<Use> &take(const std::shared_ptr<DeviceEntry> &entry, std::span<const Range> ranges,
                         std::span<const Range> extents) {
    held_.emplace_back(entry, entry->acquire(ranges, extents));
    return held_.back().second;
  }

 private:
  std::vector<std::pair<std::shared_ptr<DeviceEntry>, std::vector<Use>>> held_;
};

// The device an I/O into @p b goes through: a CUDA buffer that an open
// device has registered uses that device, whatever engine it has.
std::shared_ptr<DeviceEntry> entry_for(const Buffer &b, Range r, phx::Engine engine) {
  if (!b.place().cuda) {
    return device_entry(0, phx::Engine::host, true);
  }
  const int id = device_for_ordinal(b.place().ordinal);
  if (engine == phx::Engine::automatic) {
    for (const auto &e : open_entries(id, false)) {
      if (e->covers(r)) {
        return e;
      }
    }
  }
  return device_entry(id, engine, false);
}

int parse_mode(const py::handle &mode_arg) {
  // Every writable mode reads too: an unaligned O_DIRECT write reads the
  // blocks at its edges before writing them back.  "a" keeps what the file
  // holds and creates it if missing; writes still go where their offset
  // says (O_APPEND would make Linux's pwrite ignore it).
  static const std::map<std::string, int> modes{{"r", O_RDONLY},
                                                {"a", O_RDWR | O_CREAT},
                                                {"a+", O_RDWR | O_CREAT},
                                                {"r+", O_RDWR},
                                                {"w", O_RDWR | O_CREAT | O_TRUNC},
                                                {"w+", O_RDWR | O_CREAT | O_TRUNC},
                                                {"x", O_RDWR | O_CREAT | O_EXCL},
                                                {"x+", O_RDWR | O_CREAT | O_EXCL}};
  const std::string mode =
      py::isinstance<py::str>(mode_arg) ? py::cast<std::string>(mode_arg) : std::string();
  const auto it = modes.find(mode);
  if (!py::isinstance<py::str>(mode_arg) || it == modes.end()) {
    throw ArgumentError("mode " + std::string(py::repr(mode_arg)) +
                        ": expected r, r+, w, w+, a, a+, x or x+");
  }
  return it->second;
}

// True and False as well as the names: True asks for O_DIRECT or an error.
phx::DirectIo parse_direct(const py::handle &direct_arg) {
  if (PyBool_Check(direct_arg.ptr()) != 0) {
    return direct_arg.ptr() == Py_True ? phx::DirectIo::required : phx::DirectIo::off;
  }
  const std::string direct =
      py::isinstance<py::str>(direct_arg) ? py::cast<std::string>(direct_arg) : std::string();
  if (direct == "auto") {
    return phx::DirectIo::automatic;
  }
  if (direct == "preferred") {
    return phx::DirectIo::preferred;
  }
  if (direct == "required") {
    return phx::DirectIo::required;
  }
  if (direct == "off") {
    return phx::DirectIo::off;
  }
  throw ArgumentError("direct " + std::string(py::repr(direct_arg)) +
                      ": expected auto, preferred, required, off, True or False");
}

// One request of an I/O, checked with the GIL held.
struct Request {
  std::unique_ptr<Buffer> buffer;
  std::size_t size = 0;
  std::uint64_t file_offset = 0;
  std::size_t buffer_offset = 0;
  std::shared_ptr<DeviceEntry> device;
  [[nodiscard]] Range range() const { return range_of(buffer->data() + buffer_offset, size); }
  [[nodiscard]] Range extent() const { return range_of(buffer->data(), buffer->nbytes()); }
};

class PyFile {
 public:
  PyFile(const std::filesystem::path &path, const py::object &mode, const py::object &direct,
         const py::object &engine)
      : mode_(py::isinstance<py::str>(mode) ? py::cast<std::string>(mode) : std::string()),
        engine_(engine_arg(engine, "File: engine")) {
    const int flags = parse_mode(mode);
    const phx::DirectIo d = parse_direct(direct);
    const py::gil_scoped_release release;
    file_.emplace(path, flags, 0644, d);
    path_ = file_->path().string();
    writable_ = (flags & O_ACCMODE) != O_RDONLY;
  }

  std::size_t io(bool is_write, const char *op, const py::object &buf, const py::object &size,
                 const py::object &file_offset, const py::object &buffer_offset,
                 phx::Engine engine) {
    check();
    Request r = request(is_write, op, buf, size, file_offset, buffer_offset, engine);
    if (r.size == 0) {
      return 0;
    }
    const py::gil_scoped_release release;
    const std::shared_lock lock(mutex_);
    phx::File &f = open_file();
    Lease lease;
    const Range range = r.range();
    const Range extent = r.extent();
    const Use &use = lease.take(r.device, std::span(&range, 1), std::span(&extent, 1)).front();
    return is_write ? f.write(use.entry->reg, use.offset, r.size, r.file_offset)
                    : f.read(use.entry->reg, use.offset, r.size, r.file_offset);
  }

  std::size_t pread(const py::object &buf, const py::object &size, const py::object &file_offset,
                    const py::object &buffer_offset) {
    return io(false, "pread", buf, size, file_offset, buffer_offset, engine_);
  }
  std::size_t pwrite(const py::object &buf, const py::object &size, const py::object &file_offset,
                     const py::object &buffer_offset) {
    return io(true, "pwrite", buf, size, file_offset, buffer_offset, engine_);
  }
  std::size_t read_into(const py::object &buf, const py::object &file_offset,
                        const py::object &size, const py::object &engine) {
    return io(false, "read_into", buf, size, file_offset, py::int_(0),
              engine_arg(engine, "read_into: engine"));
  }

  std::vector<std::size_t> batch(bool is_write, const py::iterable &requests) {
    check();
    const char *op = is_write ? "pwrite_batch" : "pread_batch";
    std::vector<Request> reqs;
    for (const py::handle item : requests) {
      // Every error about a request names it.
      const std::string label = std::string(op) + " request " + std::to_string(reqs.size());
      if (!py::isinstance<py::tuple>(item) || py::len(item) == 0 || py::len(item) > 4) {
        throw py::type_error(label + ": " + std::string(py::repr(item)) +
                             " is not a tuple (buf, size, file_offset, buf_offset)");
      }
      const auto t = py::reinterpret_borrow<py::tuple>(item);
      const py::object none = py::none();
      const py::object zero = py::int_(0);
      reqs.push_back(request(is_write, label.c_str(), t[0], t.size() > 1 ? py::object(t[1]) : none,
                             t.size() > 2 ? py::object(t[2]) : zero,
                             t.size() > 3 ? py::object(t[3]) : zero, engine_));
    }
    std::vector<std::size_t> done(reqs.size(), 0);
    const py::gil_scoped_release release;
    const std::shared_lock lock(mutex_);
    phx::File &f = open_file();
    // Per device, in one order for every thread, all of its ranges at once.
    std::map<DeviceEntry *, std::vector<std::size_t>> by_device;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].size != 0) {
        by_device[reqs[i].device.get()].push_back(i);
      }
    }
    Lease lease;
    std::vector<phx::IoRequest> ios;
    // Registrations without a host view (compat, cufile) cannot go through
    // io_uring: their engine moves each one, spreading it over its threads.
    std::vector<std::pair<std::size_t, Use>> moved;
    for (const auto &[device, indices] : by_device) {
      std::vector<Range> ranges;
      std::vector<Range> extents;
      for (const std::size_t i : indices) {
        ranges.push_back(reqs[i].range());
        extents.push_back(reqs[i].extent());
      }
      const std::vector<Use> &uses = lease.take(reqs[indices.front()].device, ranges, extents);
      for (std::size_t k = 0; k < indices.size(); ++k) {
        const Request &r = reqs[indices[k]];
        const Use &u = uses[k];
        if (u.entry->reg.host_view() == nullptr) {
          moved.emplace_back(indices[k], u);
          continue;
        }
        ios.push_back(is_write ? phx::IoRequest::write(f, u.entry->reg, u.offset, r.size,
                                                       r.file_offset, indices[k])
                               : phx::IoRequest::read(f, u.entry->reg, u.offset, r.size,
                                                      r.file_offset, indices[k]));
      }
    }
    std::vector<phx::IoCompletion> completions;
    if (!ios.empty()) {
      // IoQueue is one thread's: each thread keeps its own ring.
      thread_local std::optional<phx::IoQueue> queue;
      if (!queue) {
        queue.emplace(0);
      }
      completions = queue->run(ios);
    }
    for (const auto &[i, u] : moved) {
      const Request &r = reqs[i];
      phx::IoCompletion c;
      c.user_data = i;
      try {
        c.bytes = is_write ? f.write(u.entry->reg, u.offset, r.size, r.file_offset)
                           : f.read(u.entry->reg, u.offset, r.size, r.file_offset);
      } catch (const phx::IoError &e) {
        c.bytes = e.bytes_done();
        c.error = e.code().value();
      }
      completions.push_back(c);
    }
    const phx::IoCompletion *failed = nullptr;
    for (const phx::IoCompletion &c : completions) {
      done[c.user_data] = c.bytes;
      if (c.error != 0 && (failed == nullptr || c.user_data < failed->user_data)) {
        failed = &c;
      }
    }
    if (failed != nullptr) {
      const Request &r = reqs[failed->user_data];
      throw std::system_error(failed->error, std::system_category(),
                              std::string(op) + " " + path_ + ": request " +
                                  std::to_string(failed->user_data) + " (file offset " +
                                  std::to_string(r.file_offset) + ", size " +
                                  std::to_string(r.size) + ") failed after " +
                                  std::to_string(failed->bytes) + " bytes");
    }
    return done;
  }

  // Many (file_offset, buf_offset, size) pieces of this file into one
  // buffer, merged and issued together by the device's gatherer: a slice of
  // a tensor is one piece per row.  All or nothing: a piece that fails (or
  // meets the end of the file, EIO) is the error, naming it.
  std::size_t read_ranges(const py::object &buf, const py::iterable &pieces) {
    check();
    const char *op = "read_ranges";
    struct Piece {
      std::uint64_t file_offset;
      std::size_t buf_offset;
      std::size_t size;
    };
    std::vector<Piece> list;
    for (const py::handle item : pieces) {
      const std::string label = std::string(op) + " piece " + std::to_string(list.size());
      if (!py::isinstance<py::tuple>(item) || py::len(item) != 3) {
        throw py::type_error(label + ": " + std::string(py::repr(item)) +
                             " is not a tuple (file_offset, buf_offset, size)");
      }
      const auto t = py::reinterpret_borrow<py::tuple>(item);
      const auto file_offset = int_arg<std::int64_t>(t[0], label + " file_offset");
      if (file_offset < 0) {
        throw ArgumentError(label + " file_offset " + text(t[0]) + " is negative");
      }
      list.push_back({static_cast<std::uint64_t>(file_offset),
                      int_arg<std::size_t>(t[1], label + " buf_offset"),
                      int_arg<std::size_t>(t[2], label + " size")});
    }
    Request r = request(false, op, buf, py::none(), py::int_(0), py::int_(0), engine_);
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list[i].buf_offset > r.size || list[i].size > r.size - list[i].buf_offset) {
        throw ArgumentError(std::string(op) + " " + path_ + ": piece " + std::to_string(i) +
                            " (buffer offset " + std::to_string(list[i].buf_offset) + ", size " +
                            std::to_string(list[i].size) + ") passes the buffer's " +
                            std::to_string(r.size) + " bytes");
      }
    }
    if (r.size == 0) {
      return 0;
    }
    const py::gil_scoped_release release;
    const std::shared_lock lock(mutex_);
    phx::File &f = open_file();
    Lease lease;
    const Range range = r.range();
    const Use &use = lease.take(r.device, std::span(&range, 1), std::span(&range, 1)).front();
    std::size_t total = 0;
    phx::Gather *gather = r.device->gather();
    if (gather == nullptr) {
      for (const Piece &p : list) {
        if (p.size != 0 &&
            f.read(use.entry->reg, use.offset + p.buf_offset, p.size, p.file_offset) != p.size) {
          throw std::system_error(EIO, std::system_category(),
                                  detail_of(op, p.file_offset, p.size) + ": the file ends first");
        }
        total += p.size;
      }
      return total;
    }
    std::vector<phx::GatherEntry> entries;
    entries.reserve(list.size());
    for (const Piece &p : list) {
      entries.push_back({&f, &use.entry->reg, use.offset + p.buf_offset, p.file_offset, p.size});
    }
    const phx::GatherResult result = gather->read(entries);
    if (!result.ok()) {
      const phx::GatherFailure &first = result.failures.front();
      const Piece &p = list[first.index];
      throw std::system_error(first.error == 0 ? EIO : first.error, std::system_category(),
                              detail_of(op, p.file_offset, p.size) + " (piece " +
                                  std::to_string(first.index) + ")" +
                                  (first.error == 0 ? ": the file ends first" : ""));
    }
    return result.bytes;
  }

  void close() {
    const py::gil_scoped_release release;
    const std::unique_lock lock(mutex_);
    closed_ = true;
    file_.reset();
  }
  [[nodiscard]] bool closed() const noexcept { return closed_; }
  [[nodiscard]] std::uint64_t size() {
    const std::shared_lock lock(mutex_);
    return open_file().size();
  }
  [[nodiscard]] double cached_fraction(const py::object &offset, const py::object &length) {
    const auto first = int_arg<std::uint64_t>(offset, "cached_fraction: offset");
    const auto count = int_arg<std::uint64_t>(length, "cached_fraction: length");
    const py::gil_scoped_release release;
    const std::shared_lock lock(mutex_);
    return open_file().cached_fraction(first, count);
  }
  [[nodiscard]] bool reads_buffered(const py::object &offset, const py::object &length) {
    const auto first = int_arg<std::uint64_t>(offset, "reads_buffered: file_offset");
    const auto count = int_arg<std::uint64_t>(length, "reads_buffered: size");
    const py::gil_scoped_release release;
    const std::shared_lock lock(mutex_);
    return open_file().reads_buffered(first, count);
  }
  [[nodiscard]] int fd() {
    const std::shared_lock lock(mutex_);
    return open_file().fd();
  }
  [[nodiscard]] bool direct_io() {
    const std::shared_lock lock(mutex_);
    return open_file().direct_io();
  }
  [[nodiscard]] const std::string &path() const noexcept { return path_; }
  [[nodiscard]] const std::string &mode() const noexcept { return mode_; }
  [[nodiscard]] bool writable() const noexcept { return writable_; }

 private:
  void check() const {
    if (closed_) {
      throw py::value_error("I/O operation on closed file " + path_);
    }
  }
  [[nodiscard]] std::string detail_of(const char *op, std::uint64_t file_offset,
                                      std::size_t size) const {
    return std::string(op) + " " + path_ + ": file offset " + std::to_string(file_offset) +
           ", size " + std::to_string(size);
  }
  // Under mutex_ (shared), without the GIL: close() may have won the race.
  phx::File &open_file() {
    if (!file_) {
      throw py::value_error("I/O operation on closed file " + path_);
    }
    return *file_;
  }

  // Offsets and sizes are taken as Python ints so that a negative or huge
  // one is this error, naming the file, rather than pybind's "incompatible
  // arguments".
  Request request(bool is_write, const char *op, const py::handle &buf, const py::object &size,
                  const py::object &file_offset_arg, const py::object &buffer_offset_arg,
                  phx::Engine engine) const {
    const py::int_ offset_value = index_arg(file_offset_arg, std::string(op) + " file_offset");
    const py::int_ buffer_offset_value =
        index_arg(buffer_offset_arg, std::string(op) + " buf_offset");
    const std::optional<py::int_> size_value =
        size.is_none() ? std::nullopt : std::optional(index_arg(size, std::string(op) + " size"));
    const auto context = [&] {
      const bool buffer_offset_given = !buffer_offset_value.equal(py::int_(0));
      return std::string(op) + " " + path_ + ": file offset " + text(offset_value) + ", size " +
             (size_value ? text(*size_value) : "all") +
             (buffer_offset_given ? ", buffer offset " + text(buffer_offset_value) : std::string());
    };
    // EINVAL here is always a value the caller passed.
    const auto fail = [&](int error, const std::string &why) {
      if (error == EINVAL) {
        throw ArgumentError(context() + ": " + why);
      }
      throw std::system_error(error, std::system_category(), context() + ": " + why);
    };
    const py::int_ zero(0);
    if (offset_value < zero || buffer_offset_value < zero || (size_value && *size_value < zero)) {
      fail(EINVAL, "none may be negative");
    }
    const py::int_ max_offset(std::numeric_limits<std::int64_t>::max());
    if (offset_value > max_offset || buffer_offset_value > max_offset ||
        (size_value && *size_value > max_offset)) {
      fail(EOVERFLOW, "larger than a file offset can be (2^63 - 1)");
    }
    const auto file_offset = offset_value.cast<std::int64_t>();
    const auto buffer_offset = buffer_offset_value.cast<std::int64_t>();
    const std::optional<std::int64_t> wanted =
        size_value ? std::optional(size_value->cast<std::int64_t>()) : std::nullopt;
    Request r;
    try {
      r.buffer = std::make_unique<Buffer>(buf, !is_write);
    } catch (const std::system_error &e) {
      fail(e.code().value(), what_arg_of(e));
    } catch (const py::value_error &e) {
      throw ArgumentError(context() + ": " + e.what());
    } catch (const py::type_error &e) {
      throw py::type_error(context() + ": " + e.what());
    }
    const std::size_t capacity = r.buffer->nbytes();
    r.buffer_offset = static_cast<std::size_t>(buffer_offset);
    if (r.buffer_offset > capacity) {
      fail(EINVAL, "past the buffer's " + std::to_string(capacity) + " bytes");
    }
    r.size = wanted ? static_cast<std::size_t>(*wanted) : capacity - r.buffer_offset;
    if (r.size > capacity - r.buffer_offset) {
      fail(EINVAL, "more than the buffer's " + std::to_string(capacity) + " bytes");
    }
    r.file_offset = static_cast<std::uint64_t>(file_offset);
    if (r.size != 0) {
      const Range range = r.range();
      const py::gil_scoped_release release;
      r.device = entry_for(*r.buffer, range, engine);
    }
    return r;
  }

  std::optional<phx::File> file_;  // under mutex_
  std::atomic<bool> closed_ = false;
  std::shared_mutex mutex_;
  std::string path_;
  std::string mode_;
  phx::Engine engine_;
  bool writable_ = false;
};

template <class T>
void add_context_manager(py::class_<T> &cls) {
  cls.def("__enter__", [](py::object self) { return self; })
      .def(
          "__exit__",
          [](T &self, const py::object &, const py::object &, const py::object &) {
            self.close();
            return false;
          },
          py::arg("exc_type"), py::arg("exc"), py::arg("tb"));
}

}  // namespace

void bind_io(py::module_ &m) {
  m.def(
      "_buffer_nbytes",
      [](const py::object &buf, bool writable) { return Buffer(buf, writable).nbytes(); },
      py::arg("buf"), py::arg("writable") = false,
      "The bytes of memory buf describes (a face cutting a request into tasks needs it).");
  py::class_<PyRegistration> reg(m, "Registration", R"(A buffer registered on a Device once,
for many reads and writes.

Made by Device.register(buf).  Any I/O whose buffer lies inside it uses it:
no pin-and-map per call.  Keeps the buffer object alive until close();
a context manager.  Deregistration waits for I/O still using it.)");
  reg.def("close", &PyRegistration::close,
          "Deregisters (once the I/O using it ends) and drops the buffer. Idempotent.")
      .def_property_readonly("closed", &PyRegistration::closed, "True after close().")
      .def_property_readonly("ptr", &PyRegistration::ptr, "Address of the registered memory.")
      .def_property_readonly("nbytes", &PyRegistration::nbytes, "Bytes registered.")
      .def_property_readonly("device", &PyRegistration::device,
                             R"(Where the memory is: "cpu" or "cuda:N".)")
      .def_property_readonly("buffer", &PyRegistration::buffer, "The registered object.");
  add_context_manager(reg);

  py::class_<PyDevice> dev(m, "Device", R"(A device opened with an engine, for registering buffers.

Device("cpu") serves host memory (numpy, bytearray...) with the host engine;
Device("cuda:N") a CUDA GPU (torch's numbering) with engine "auto" (direct
where the phxfs module serves the GPU, else compat), "direct", "compat" or
"cufile".  The engine behind it (threads, staging memory) is set up once per
process and shared by every Device of that GPU and engine, with the first
one's options: Device(..., options=Options(copy_threads=4)) sizes it, and a
later Device asking for other options raises OSError(EBUSY).  close() (or
the end of a with block) closes the registrations made through this Device.)");
  dev.def(py::init<const py::object &, const py::object &, const std::optional<phx::Options> &>(),
          py::arg("device") = "cpu", py::arg("engine") = "auto", py::kw_only(),
          py::arg("options") = py::none())
      .def("register", &PyDevice::register_buffer, py::arg("buf"),
           R"(Registers buf (DLPack, CUDA array interface or buffer protocol; contiguous)
once for many I/Os.  Registering memory that a live registration already
covers shares it.  Raises ValueError (buffer on another device, empty,
Device closed) or OSError (EINVAL: overlaps a registration without lying
inside it; EFAULT: not mapped; the engine's errors).)")
      .def("close", &PyDevice::close, "Closes the registrations made here. Idempotent.")
      .def_property_readonly("closed", &PyDevice::closed, "True after close().")
      .def_property_readonly("id", &PyDevice::id, "Phoenix device id.")
      .def_property_readonly("engine", &PyDevice::engine,
                             R"(The engine: "direct", "compat", "host" or "cufile".)")
      .def_property_readonly("engine_reason", &PyDevice::reason, "Why that engine.")
      .def_property_readonly("options", &PyDevice::options,
                             "The Options the engine behind this Device was opened with.")
      .def_property_readonly("name", &PyDevice::name, R"("cpu" or "cuda:N" as given.)")
      .def_property_readonly("stats", &PyDevice::stats,
                             R"({"live": registrations now, "registered": pin-and-map calls
so far} for this device and engine (every Device sharing it).)");
  add_context_manager(dev);

  py::class_<PyFile> file(m, "File", R"(A file opened for Phoenix I/O.

File(path, mode="r", *, direct="auto", engine="auto").  mode: "r"
read-only, "r+" read-write, "w"/"w+" created or truncated, "x"/"x+" created
and new (writable modes read too: unaligned O_DIRECT writes read their edge
blocks).  direct: "auto" (each read through the page cache when it holds at
least half of the range, else O_DIRECT), "preferred" (O_DIRECT where the
filesystem has it), "required", "off".  engine: for CUDA buffers no open Device has
registered.  A context manager; close() waits for I/O in flight.)");
  file.def(py::init<const std::filesystem::path &, const py::object &, const py::object &,
                    const py::object &>(),
           py::arg("path"), py::arg("mode") = "r", py::kw_only(), py::arg("direct") = "auto",
           py::arg("engine") = "auto")
      .def("pread", &PyFile::pread, py::arg("buf"), py::arg("size") = py::none(),
           py::arg("file_offset") = 0, py::arg("buf_offset") = 0,
           R"(Reads size bytes (default: the rest of buf) at file_offset into buf at
buf_offset; returns the bytes read (short only at end of file).  Uses a
registration covering the range, else registers buf for this call only.)")
      .def("pwrite", &PyFile::pwrite, py::arg("buf"), py::arg("size") = py::none(),
           py::arg("file_offset") = 0, py::arg("buf_offset") = 0,
           "Writes size bytes of buf from buf_offset to file_offset; returns the bytes written.")
      .def(
          "pread_batch",
          [](PyFile &f, const py::iterable &requests) { return f.batch(false, requests); },
          py::arg("requests"),
          R"(Reads many (buf, size, file_offset, buf_offset) requests at once through
io_uring; returns the bytes read by each, in order.  size may be None
(the rest of buf); trailing fields may be left out.)")
      .def(
          "pwrite_batch",
          [](PyFile &f, const py::iterable &requests) { return f.batch(true, requests); },
          py::arg("requests"), "pread_batch's write counterpart.")
      .def("read_ranges", &PyFile::read_ranges, py::arg("buf"), py::arg("pieces"),
           R"(Reads many (file_offset, buf_offset, size) pieces into buf at once, merged
into few large requests; returns the bytes read.  A piece that meets the end
of the file is OSError(EIO).)")
      .def("read_into", &PyFile::read_into, py::arg("tensor"), py::arg("file_offset") = 0,
           py::arg("size") = py::none(), py::arg("engine") = "auto",
           "pread(tensor, size, file_offset) with this call's engine (the original API).")
      .def("close", &PyFile::close, "Closes the file (after I/O in flight). Idempotent.")
      .def_property_readonly("closed", &PyFile::closed, "True after close().")
      .def_property_readonly("size", &PyFile::size, "The file's size in bytes.")
      .def("cached_fraction", &PyFile::cached_fraction, py::arg("offset") = 0,
           py::arg("length") = std::numeric_limits<std::uint64_t>::max(),
           R"(Fraction (0 to 1) of [offset, offset + length) that the page cache holds
(mincore): whether a buffered read would be served from memory.)")
      .def("reads_buffered", &PyFile::reads_buffered, py::arg("file_offset"), py::arg("size"),
           R"(Whether a read of [file_offset, file_offset + size) into host or compat
GPU memory would go through the page cache now: direct="auto" asks the page
cache (at least half of the range held), "off" always, "preferred" and
"required" never (where the file has O_DIRECT).)")
      .def_property_readonly("fd", &PyFile::fd, "The file descriptor.")
      .def_property_readonly("direct_io", &PyFile::direct_io, "True when opened O_DIRECT.")
      .def_property_readonly("path", &PyFile::path, "The path as opened.")
      .def_property_readonly("mode", &PyFile::mode, "The mode as given.")
      .def_property_readonly("writable", &PyFile::writable, R"(True unless mode is "r".)");
  add_context_manager(file);
}

}  // namespace phx::python
