// SPDX-License-Identifier: MIT
// The `phoenix_gds._phoenix` extension: safetensors loading into GPU (or
// host) memory, tensors handed out through DLPack, and Device, Registration
// and File for reads and writes into any buffer (io.cpp).  Python-level
// conveniences live in phoenix_gds/__init__.py.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cerrno>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "dlpack_export.hpp"
#include "errors.hpp"
#include "int_arg.hpp"
#include "io.hpp"
#include "options.hpp"
#include "phoenix/phoenix.hpp"
#include "phoenix/safetensors.hpp"
#include "registry.hpp"

namespace py = pybind11;
namespace st = phx::safetensors;

namespace phx::python {
namespace {

st::CachePolicy parse_cache(const py::handle &arg) {
  const std::string name = py::isinstance<py::str>(arg) ? py::cast<std::string>(arg) : "";
  if (name == "auto") {
    return st::CachePolicy::automatic;
  }
  if (name == "direct") {
    return st::CachePolicy::direct;
  }
  if (name == "buffered") {
    return st::CachePolicy::buffered;
  }
  throw ArgumentError("cache " + std::string(py::repr(arg)) +
                      ": expected auto, direct or buffered");
}

std::vector<std::filesystem::path> to_paths(const py::object &paths) {
  std::vector<std::filesystem::path> out;
  if (py::isinstance<py::str>(paths) || py::hasattr(paths, "__fspath__")) {
    out.emplace_back(py::cast<std::filesystem::path>(paths));
  } else {
    for (const py::handle item : paths) {
      out.emplace_back(py::cast<std::filesystem::path>(item));
    }
  }
  return out;
}

py::dict tensors_dict(const st::LoadedCheckpoint &loaded) {
  py::dict out;
  for (const st::LoadedTensor &t : loaded.tensors) {
    TensorHandle h;
    h.name = t.info->name;
    h.dtype = t.info->dtype;
    for (const std::uint64_t d : t.info->shape) {
      h.shape.push_back(static_cast<std::int64_t>(d));
    }
    h.data = t.data;
    h.nbytes = t.info->size();
    h.cuda = t.memory == st::MemoryKind::cuda;
    h.cuda_ordinal = t.cuda_ordinal;
    h.device = t.device;
    h.owner = t.owner;
    const py::str key(h.name);  // before h is moved from
    out[key] = py::cast(std::move(h));
  }
  return out;
}

// Loader bound to one target device (or a device map), devices kept open.
class PyLoader {
 public:
  PyLoader(const py::object &device, const py::object &engine, const py::object &device_map,
           const py::object &cache, const py::object &chunk_size, const py::object &queue_depth,
           const py::object &parallel_files, bool pinned, const py::object &cold_reader,
           const py::object &cold_request, const py::object &cold_in_flight)
      : loader_(make_options(device, engine, device_map, cache, chunk_size, queue_depth,
                             parallel_files, pinned)) {
    set_cold_shape(loader_, cold_reader, cold_request, cold_in_flight);
  }

  void warm_up(const py::object &paths) {
    const auto files = to_paths(paths);
    const py::gil_scoped_release release;
    loader_.warm_up(st::open_checkpoint(files));
  }

  py::dict load(const py::object &paths, const py::object &progress, const py::object &keys) {
    const auto files = to_paths(paths);
    std::optional<std::vector<std::string>> names;
    if (!keys.is_none()) {
      if (py::isinstance<py::str>(keys) || !py::isinstance<py::iterable>(keys)) {
        throw ArgumentError("keys " + std::string(py::repr(keys)) +
                            ": expected an iterable of tensor names");
      }
      names.emplace();
      for (const py::handle key : keys) {
        if (!py::isinstance<py::str>(key)) {
          throw ArgumentError("keys: " + std::string(py::repr(key)) + " is not a tensor name");
        }
        names->push_back(py::cast<std::string>(key));
      }
    }
    std::shared_ptr<st::LoadedCheckpoint> loaded;
    if (!progress.is_none()) {
      loader_.set_progress([progress](std::uint64_t done, std::uint64_t total) {
        const py::gil_scoped_acquire gil;
        progress(done, total);
      });
    } else {
      loader_.set_progress({});
    }
    {
      const py::gil_scoped_release release;
      st::Checkpoint checkpoint = st::open_checkpoint(files);
      if (names) {
        checkpoint = st::select_tensors(std::move(checkpoint), *names);
      }
      loaded = loader_.load(std::move(checkpoint));
    }
    last_stats_ = loaded->stats;
    return tensors_dict(*loaded);
  }

  [[nodiscard]] py::dict stats() const {
    py::dict d;
    d["seconds"] = last_stats_.seconds;
    d["allocate_seconds"] = last_stats_.allocate_seconds;
    d["bytes_read"] = last_stats_.bytes_read;
    d["tensor_bytes"] = last_stats_.tensor_bytes;
    d["files"] = last_stats_.files;
    d["files_direct"] = last_stats_.files_direct;
    d["files_streamed"] = last_stats_.files_streamed;
    d["segments"] = last_stats_.segments;
    py::dict engines;
    for (const auto &[id, engine] : last_stats_.engines) {
      engines[py::int_(id)] = std::string(phx::to_string(engine));
    }
    d["engines"] = engines;
    py::list per_file;
    for (const st::FileReadStats &fs : last_stats_.per_file) {
      py::dict f;
      f["path"] = fs.path.string();
      f["bytes"] = fs.bytes;
      f["mode"] = fs.direct ? "direct" : "buffered";
      f["path_taken"] = fs.path_taken;
      f["threads"] = fs.threads;
      f["request_bytes"] = fs.request_bytes;
      f["depth"] = fs.depth;
      f["resident"] =
          fs.resident < 0 ? py::object(py::none()) : py::object(py::float_(fs.resident));
      f["why"] = fs.why;
      per_file.append(f);
    }
    d["per_file"] = per_file;
    return d;
  }

 private:
  static st::LoadOptions make_options(const py::object &device_arg, const py::object &engine_name,
                                      const py::object &device_map, const py::object &cache,
                                      const py::object &chunk_size, const py::object &queue_depth,
                                      const py::object &parallel_files, bool pinned) {
    st::LoadOptions o;
    const Target target = parse_target(device_name(device_arg));
    const phx::Engine engine = engine_arg(engine_name, "load options: engine");
    o.engine = target.cuda ? engine : phx::Engine::host;
    if (!target.cuda && engine != phx::Engine::automatic && engine != phx::Engine::host) {
      throw ArgumentError("engine \"" + std::string(phx::to_string(engine)) +
                          "\" cannot load to the CPU (use host)");
    }
    o.devices.default_device = target.device;
    if (!device_map.is_none()) {
      if (!py::isinstance<py::dict>(device_map)) {
        throw ArgumentError("device_map " + std::string(py::repr(device_map)) +
                            ": expected a dict {tensor name prefix: device}");
      }
      for (const auto &[prefix, dev] : py::reinterpret_borrow<py::dict>(device_map)) {
        if (!py::isinstance<py::str>(prefix)) {
          throw ArgumentError("device_map key " + std::string(py::repr(prefix)) +
                              ": expected a tensor name prefix (str)");
        }
        o.devices.prefixes.emplace_back(py::cast<std::string>(prefix),
                                        parse_target(device_name(dev)).device);
      }
    }
    o.cache = parse_cache(cache);
    o.chunk_size = int_arg<std::size_t>(chunk_size, "load options: chunk_size");
    o.queue_depth = int_arg<unsigned>(queue_depth, "load options: queue_depth");
    o.parallel_files = int_arg<unsigned>(parallel_files, "load options: parallel_files");
    o.pinned_host = pinned;
    return o;
  }

  // LoadOptions::cold_*: None keeps the rule's part of the shape.
  static void set_cold_shape(st::Loader &loader, const py::object &reader,
                             const py::object &request, const py::object &in_flight) {
    st::LoadOptions o = loader.options();
    const std::string name = reader.is_none() ? "auto" : py::cast<std::string>(py::str(reader));
    if (name == "auto") {
      o.cold_reader = st::ColdReader::automatic;
    } else if (name == "threads") {
      o.cold_reader = st::ColdReader::threads;
    } else if (name == "stripes") {
      o.cold_reader = st::ColdReader::stripes;
    } else if (name == "uring") {
      o.cold_reader = st::ColdReader::uring;
    } else {
      throw ArgumentError("cold_reader \"" + name +
                          R"(": expected "auto", "threads", "stripes" or "uring")");
    }
    o.cold_request =
        request.is_none() ? 0 : int_arg<std::size_t>(request, "load options: cold_request");
    o.cold_in_flight =
        in_flight.is_none() ? 0 : int_arg<unsigned>(in_flight, "load options: cold_in_flight");
    if (o.cold_request == 0 && !request.is_none()) {
      throw ArgumentError("cold_request must be positive (None: the rule's)");
    }
    if (o.cold_in_flight == 0 && !in_flight.is_none()) {
      throw ArgumentError("cold_in_flight must be positive (None: the rule's)");
    }
    loader = st::Loader(std::move(o));
  }

  st::Loader loader_;
  st::LoadStats last_stats_;
};

// A CPU tensor's bytes through the buffer protocol (writable, as numpy
// arrays are), keeping its memory alive; CUDA tensors never get one, so
// the buffer callback cannot fail.
struct HostBytes {
  std::byte *data = nullptr;
  std::size_t nbytes = 0;
  std::shared_ptr<st::Allocation> owner;
};

// One file's header, validated by the library: what safe_open serves.
py::dict header_dict(const st::FileHeader &h) {
  py::dict tensors;
  for (const st::TensorInfo &t : h.tensors) {
    py::tuple shape(t.shape.size());
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      shape[i] = t.shape[i];
    }
    tensors[py::str(t.name)] = py::make_tuple(std::string(st::to_string(t.dtype)), shape,
                                              h.data_offset() + t.begin, h.data_offset() + t.end);
  }
  py::dict out;
  out["path"] = h.path.string();
  out["file_size"] = h.file_size;
  out["data_offset"] = h.data_offset();
  out["metadata"] = h.metadata;
  out["tensors"] = tensors;
  return out;
}

py::tuple shape_tuple(const TensorHandle &t) {
  py::tuple shape(t.shape.size());
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    shape[i] = t.shape[i];
  }
  return shape;
}

}  // namespace
}  // namespace phx::python

PYBIND11_MODULE(_phoenix, m) {
  using phx::python::ArgumentError;
  using phx::python::PyLoader;
  using phx::python::TensorHandle;
  m.doc() = "libphoenix: safetensors checkpoints straight into GPU memory";

  phx::python::register_errors(m);

  py::class_<TensorHandle>(m, "Tensor",
                           "A loaded tensor; hand it to torch/cupy/jax/numpy.from_dlpack")
      .def_readonly("name", &TensorHandle::name, "The tensor's name in the checkpoint.")
      .def_property_readonly(
          "dtype",
          [](const TensorHandle &t) { return std::string(phx::safetensors::to_string(t.dtype)); },
          R"(The safetensors dtype ("F32", "BF16"...).)")
      .def_property_readonly("shape", &phx::python::shape_tuple, "The shape, a tuple.")
      .def_readonly("nbytes", &TensorHandle::nbytes, "Bytes of data.")
      .def_property_readonly(
          "data_ptr",
          [](const TensorHandle &t) { return reinterpret_cast<std::uintptr_t>(t.data); },
          "Address of the data.")
      .def_property_readonly(
          "device",
          [](const TensorHandle &t) {
            return t.cuda ? "cuda:" + std::to_string(t.cuda_ordinal) : std::string("cpu");
          },
          R"(Where the data is: "cpu" or "cuda:N".)")
      .def(
          "__dlpack__",
          [](const TensorHandle &t, const py::object & /*stream*/,
             const py::object & /*max_version*/, const py::object & /*dl_device*/,
             const py::object & /*copy*/) {
            // The data is complete when load() returns: no stream to order against.
            PyObject *capsule = phx::python::make_capsule(t);
            if (capsule == nullptr) {
              throw py::error_already_set();
            }
            return py::reinterpret_steal<py::object>(capsule);
          },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__",
           [](const TensorHandle &t) {
             return py::make_tuple(static_cast<int>(t.cuda ? kDLCUDA : kDLCPU),
                                   t.cuda ? t.cuda_ordinal : 0);
           })
      .def(
          "as_bytes",
          [](const TensorHandle &t) {
            TensorHandle raw = t;
            raw.raw_bytes = true;
            return raw;
          },
          "The same memory as a flat U8 tensor (for dtypes a framework lacks)")
      .def(
          "_host_bytes",
          [](const TensorHandle &t) {
            if (t.cuda) {
              throw ArgumentError("tensor " + t.name +
                                  " is on cuda:" + std::to_string(t.cuda_ordinal) +
                                  ", not in host memory: copy it to the CPU first");
            }
            return phx::python::HostBytes{t.data, t.nbytes, t.owner};
          },
          "The bytes of a CPU tensor, writable, through the buffer protocol.")
      .def("__repr__", [](const TensorHandle &t) {
        std::string shape;
        for (const std::int64_t d : t.shape) {
          if (!shape.empty()) {
            shape += ", ";
          }
          shape += std::to_string(d);
        }
        return "phoenix_gds.Tensor(" + t.name + ", " +
               std::string(phx::safetensors::to_string(t.dtype)) + ", [" + shape + "], " +
               (t.cuda ? "cuda:" + std::to_string(t.cuda_ordinal) : std::string("cpu")) + ")";
      });

  py::class_<phx::python::HostBytes>(m, "_HostBytes", py::buffer_protocol())
      .def_buffer([](phx::python::HostBytes &h) {
        return py::buffer_info(h.data, 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(h.nbytes)}, {py::ssize_t{1}}, false);
      });

  m.def(
      "read_header",
      [](const std::filesystem::path &path) {
        st::FileHeader h;
        {
          const py::gil_scoped_release release;
          h = st::read_header(path);
        }
        return phx::python::header_dict(h);
      },
      py::arg("path"),
      R"(A .safetensors file's header, validated: {"path", "file_size", "data_offset",
"metadata", "tensors": {name: (dtype, shape, file begin, file end)}}.)");
  m.def(
      "parse_header",
      [](const py::buffer &data, const std::string &name) {
        const py::buffer_info info = data.request();
        if (info.ndim != 1 || info.itemsize != 1 || info.strides.at(0) != 1) {
          throw phx::python::ArgumentError("parse_header takes contiguous bytes");
        }
        const std::span<const std::byte> bytes(static_cast<const std::byte *>(info.ptr),
                                               static_cast<std::size_t>(info.size));
        return phx::python::header_dict(st::parse_file(bytes, name));
      },
      py::arg("data"), py::arg("name") = "<bytes>",
      R"(read_header of a whole file held in memory (bytes), named name in errors.)");
  m.def(
      "dtypes",
      [] {
        py::list out;
        for (const st::Dtype d : st::all_dtypes()) {
          out.append(py::make_tuple(std::string(st::to_string(d)), st::bit_size(d)));
        }
        return out;
      },
      "[(safetensors dtype, bits per element)], in safetensors' order (ascending alignment).");
  m.def(
      "checkpoint_files",
      [](const std::filesystem::path &path) {
        const py::gil_scoped_release release;
        return st::checkpoint_files(path);
      },
      py::arg("path"), "The .safetensors files a file, folder or index stands for.");

  py::class_<PyLoader>(m, "Loader")
      .def(py::init<const py::object &, const py::object &, const py::object &, const py::object &,
                    const py::object &, const py::object &, const py::object &, bool,
                    const py::object &, const py::object &, const py::object &>(),
           py::arg("device") = "cuda:0", py::arg("engine") = "auto",
           py::arg("device_map") = py::none(), py::arg("cache") = "auto",
           py::arg("chunk_size") = py::int_(std::size_t{32} << 20),
           py::arg("queue_depth") = py::int_(8), py::arg("parallel_files") = py::int_(4),
           py::arg("pinned") = false, py::arg("cold_reader") = "auto",
           py::arg("cold_request") = py::none(), py::arg("cold_in_flight") = py::none())
      .def("warm_up", &PyLoader::warm_up, py::arg("paths"))
      .def("load", &PyLoader::load, py::arg("paths"), py::arg("progress") = py::none(),
           py::arg("keys") = py::none())
      .def_property_readonly("stats", &PyLoader::stats);

  phx::python::bind_options(m);
  phx::python::bind_io(m);

  m.def(
      "engine_for",
      [](const py::object &device) {
        const phx::python::Target t = phx::python::parse_target(phx::python::device_name(device));
        if (!t.cuda) {
          return std::string("host");
        }
        return std::string(phx::to_string(phx::choose_engine(t.device).engine));
      },
      py::arg("device") = "cuda:0", "The engine auto picks for a device");
  m.def(
      "release_idle_engines",
      [] {
        const py::gil_scoped_release release;  // joins copy threads
        (void)phx::python::close_unused_entries();
        return phx::release_idle_engines();
      },
      R"(Stops the engines kept set up after their devices closed; returns how many.

A GPU's compat engine (copy threads, pinned staging) outlives the Loader or
Device that used it, so the next load in the process starts with it ready;
it stays until this call or the end of the process.)");
  m.attr("__version__") = PHOENIX_VERSION_STRING;
}
