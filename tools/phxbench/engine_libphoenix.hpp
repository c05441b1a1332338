// SPDX-License-Identifier: MIT
// What the phoenix, compat, gds and host engines share: a phx::Device opened
// with one libphoenix engine, buffers registered on it, and I/O through
// phx::File and phx::IoQueue.  They differ in the engine and in where the
// buffers live.
#ifndef PHXBENCH_ENGINE_LIBPHOENIX_HPP
#define PHXBENCH_ENGINE_LIBPHOENIX_HPP

#include <memory>
#include <string_view>

#include "engine.hpp"

namespace phxbench {

enum class BufferMemory { host, gpu };

/// Opens device options.device with libphoenix's engine @p library_engine
/// (a name for phx::parse_engine, so an engine this library does not know
/// is reported, not a build failure).  @p tool_name names it in errors.
/// Throws Unavailable when the library, the module or the GPU is missing.
[[nodiscard]] std::unique_ptr<Engine> make_libphoenix_engine(const Options &options,
                                                             std::string_view tool_name,
                                                             std::string_view library_engine,
                                                             BufferMemory memory);

}  // namespace phxbench

#endif  // PHXBENCH_ENGINE_LIBPHOENIX_HPP
