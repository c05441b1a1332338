// SPDX-License-Identifier: MIT
// What the direct, compat, cufile and host engines share: a phx::Device opened
// with one libphoenix engine, buffers registered on it, and I/O through
// phx::File and phx::IoQueue.  They differ in the engine and in where the
// buffers live.
#ifndef PHXBENCH_ENGINE_LIBPHOENIX_HPP
#define PHXBENCH_ENGINE_LIBPHOENIX_HPP

#include <memory>
#include <string_view>

#include "common/engine_spec.hpp"
#include "engine.hpp"

namespace phxbench {

/// Opens device options.device with @p spec's engine.  Throws Unavailable
/// when the module, the engine or the GPU is missing.
[[nodiscard]] std::unique_ptr<Engine> make_libphoenix_engine(const Options &options,
                                                             const phxtools::EngineSpec &spec);

}  // namespace phxbench

#endif  // PHXBENCH_ENGINE_LIBPHOENIX_HPP
