// SPDX-License-Identifier: MIT
#include "options.hpp"

#include <pybind11/operators.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "errors.hpp"
#include "int_arg.hpp"
#include "io.hpp"
#include "phoenix/phoenix.hpp"

namespace py = pybind11;

namespace phx::python {
namespace {

// A field out of range is a bad argument value: ArgumentError.
void validate(const phx::Options &o) {
  try {
    o.validate();
  } catch (const std::system_error &e) {
    if (e.code().value() == EINVAL) {
      throw ArgumentError(what_arg_of(e));
    }
    throw;
  }
}

// Keyword construction from the process defaults, as phxfs_options_init
// does in C: Options(copy_threads=4) changes only what it names.
phx::Options make(const py::kwargs &fields) {
  phx::Options o = phx::Options::defaults();
  py::object self = py::cast(o);
  for (const auto &[key, value] : fields) {
    const auto name = py::cast<std::string>(key);
    if (!py::hasattr(self, name.c_str()) || name.starts_with("_") || name == "validate" ||
        name == "defaults" || name == "from_environment" || name == "set_defaults") {
      throw py::type_error("Options: unknown field \"" + name + "\"");
    }
    py::setattr(self, name.c_str(), value);
  }
  o = py::cast<phx::Options>(self);
  validate(o);
  return o;
}

// A numeric field whose setter range-checks: Options(copy_threads=-1) is
// OSError(EINVAL) naming the field, as validate()'s range errors are.
template <typename T>
void integer_field(py::class_<phx::Options> &options, const char *name, T phx::Options::*field,
                   const char *doc) {
  options.def_property(
      name, [field](const phx::Options &o) { return o.*field; },
      [field, name](phx::Options &o, const py::object &value) {
        o.*field = int_arg<T>(value, std::string("Options.") + name);
      },
      doc);
}

std::string read_cache_name(phx::ReadCache cache) {
  return cache == phx::ReadCache::descriptor ? "descriptor" : "auto";
}

std::string repr(const phx::Options &o) {
  return "Options(engine=\"" + std::string(phx::to_string(o.engine)) +
         "\", queue_depth=" + std::to_string(o.queue_depth) +
         ", staging_bytes=" + std::to_string(o.staging_bytes) +
         ", copy_threads=" + std::to_string(o.copy_threads) +
         ", copy_depth=" + std::to_string(o.copy_depth) +
         ", copy_chunk=" + std::to_string(o.copy_chunk) +
         ", copy_direct_chunk=" + std::to_string(o.copy_direct_chunk) +
         ", stream_workers=" + std::to_string(o.stream_workers) +
         ", stream_staging_bytes=" + std::to_string(o.stream_staging_bytes) +
         ", stream_lanes=" + std::to_string(o.stream_lanes) +
         ", copy_spin_us=" + std::to_string(o.copy_spin_us) + ", read_cache=\"" +
         read_cache_name(o.read_cache) + "\")";
}

}  // namespace

void bind_options(py::module_ &m) {
  py::class_<phx::Options> options(m, "Options", R"(A device's tunables (phx::Options).

Options(**fields) starts from the process defaults (built-in values with
the PHX_* environment applied, read once) and changes the fields named:
Options(copy_threads=8, copy_direct_chunk=32 << 20).  Pass it to
Device(..., options=...).  Out-of-range values raise OSError(EINVAL) naming
the field.  Fields and their variables: docs/configuration.md.)");
  options.def(py::init(&make))
      .def_property(
          "engine", [](const phx::Options &o) { return std::string(phx::to_string(o.engine)); },
          [](phx::Options &o, const py::object &name) {
            o.engine = engine_arg(name, "Options.engine");
          },
          R"(PHX_ENGINE: "auto", "direct", "host", "compat" or "cufile".)")
      .def_property(
          "read_cache", [](const phx::Options &o) { return read_cache_name(o.read_cache); },
          [](phx::Options &o, const py::object &value) {
            if (!py::isinstance<py::str>(value)) {
              throw ArgumentError("Options.read_cache " + std::string(py::repr(value)) +
                                  R"(: expected "auto" or "descriptor")");
            }
            const auto name = py::cast<std::string>(value);
            if (name != "auto" && name != "descriptor") {
              throw ArgumentError("Options.read_cache " + std::string(py::repr(value)) +
                                  R"(: expected "auto" or "descriptor")");
            }
            o.read_cache = name == "auto" ? phx::ReadCache::automatic : phx::ReadCache::descriptor;
          },
          R"(PHX_READ_CACHE: how the C API reads through an O_DIRECT descriptor, "auto"
(a range the page cache holds through the page cache) or "descriptor".)")
      .def_static(
          "defaults", &phx::Options::defaults,
          "The process defaults (the environment as first read, or as set_defaults set them).")
      .def_static("from_environment", &phx::Options::from_environment,
                  "The built-in defaults with the environment applied, read now.")
      .def_static(
          "set_defaults",
          [](const phx::Options &o) {
            validate(o);
            phx::Options::set_defaults(o);
          },
          py::arg("options"),
          R"(Makes options the process defaults, for the engines set up from now on
(engines already set up keep theirs); ArgumentError names a field out of range.)")
      .def("validate", &validate,
           "Raises ArgumentError (ValueError, OSError EINVAL) naming the first field out of range.")
      .def(py::self == py::self)  // NOLINT(misc-redundant-expression)
      .def("__repr__", &repr);
  integer_field(options, "queue_depth", &phx::Options::queue_depth,
                "PHX_QUEUE_DEPTH: io_uring entries (1-32768).");
  integer_field(options, "staging_bytes", &phx::Options::staging_bytes,
                "PHX_STAGING_SIZE: host bounce buffer per I/O thread.");
  integer_field(options, "copy_threads", &phx::Options::copy_threads,
                "PHX_COPY_THREADS: compat copy threads (1-256).");
  integer_field(options, "copy_depth", &phx::Options::copy_depth,
                "PHX_COPY_DEPTH: chunks in flight per copy thread (2-64).");
  integer_field(options, "copy_chunk", &phx::Options::copy_chunk,
                "PHX_COPY_CHUNK: compat chunk on buffered files.");
  integer_field(options, "copy_direct_chunk", &phx::Options::copy_direct_chunk,
                "PHX_COPY_DIRECT_CHUNK: compat chunk on O_DIRECT files.");
  integer_field(options, "stream_workers", &phx::Options::stream_workers,
                "PHX_STREAM_WORKERS: threads running stream-ordered I/O.");
  integer_field(options, "stream_staging_bytes", &phx::Options::stream_staging_bytes,
                "PHX_STREAM_STAGING: pinned memory of stream-ordered compat I/O.");
  integer_field(options, "stream_lanes", &phx::Options::stream_lanes,
                "PHX_STREAM_LANES: threads reading one staged stream-ordered read (1-64).");
  integer_field(options, "copy_spin_us", &phx::Options::copy_spin_us,
                "PHX_COPY_SPIN_US: microseconds idle copy threads poll before sleeping (0-10000).");
}

}  // namespace phx::python
