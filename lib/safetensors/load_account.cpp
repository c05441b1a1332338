// SPDX-License-Identifier: MIT
// The loader's account stage: what each file got, and where each tensor
// landed (load_stages.hpp).
#include <string>
#include <vector>

#include "safetensors/load_stages.hpp"

namespace phx::safetensors::stage {

std::vector<FileReadStats> account_files(const Checkpoint &ckpt, const std::vector<Target> &targets,
                                         const ReadRoutes &routes, const LoadOptions &options,
                                         const DeviceOf &device) {
  std::vector<FileReadStats> per_file(ckpt.files.size());
  for (std::size_t f = 0; f < per_file.size(); ++f) {
    FileReadStats &fs = per_file[f];
    fs.path = ckpt.files[f].path;
    const Target *first = nullptr;
    for (const Target &t : targets) {
      if (t.segment->file == f) {
        // The tensors' own bytes, as FileReadStats::bytes says: not the
        // segment's, whose ends are rounded out to the alignment.
        for (const std::size_t index : t.segment->tensors) {
          fs.bytes += ckpt.files[f].tensors[index].size();
        }
        first = first != nullptr ? first : &t;
      }
    }
    const ReadDecision &d = routes.decisions[f];
    fs.direct = d.mode != DirectIo::off;
    fs.resident = d.resident;
    fs.why = d.why;
    if (routes.streamed[f] != 0 && first != nullptr) {  // a streamed file has targets
      const ColdShape &shape = routes.shapes.at(first->segment->device);
      const bool threads = shape.reader != ColdReader::uring;
      fs.path_taken = threads ? "readers" : "stream";
      fs.threads = threads ? shape.in_flight : 1;
      fs.request_bytes = shape.request;
      fs.depth = shape.in_flight;
      fs.why += "; " + shape.why;
      continue;
    }
    if (first == nullptr) {
      fs.direct = false;
      fs.why = "not read: none of its tensors were asked for";
      continue;
    }
    const Device &dev = device(first->segment->device);
    if (first->registration.host_view() != nullptr) {
      fs.path_taken = "queue";
      fs.threads = 1;
      fs.request_bytes = options.chunk_size;
      fs.depth = options.queue_depth;
    } else {
      const Options &o = dev.options();
      const bool copy_threads = dev.engine() == Engine::compat;
      fs.path_taken = "engine";
      fs.threads = copy_threads ? o.copy_threads : 1;
      fs.request_bytes = fs.direct ? o.copy_direct_chunk : o.copy_chunk;
      fs.depth = copy_threads ? std::size_t{o.copy_threads} * o.copy_depth : 1;
    }
  }
  return per_file;
}

std::vector<LoadedTensor> loaded_tensors(const Checkpoint &ckpt,
                                         const std::vector<Target> &targets) {
  std::vector<LoadedTensor> tensors;
  tensors.reserve(ckpt.tensor_count());
  for (const Target &t : targets) {
    const FileHeader &file = ckpt.files[t.segment->file];
    for (const std::size_t index : t.segment->tensors) {
      const TensorInfo &info = file.tensors[index];
      LoadedTensor lt;
      lt.info = &info;
      lt.device = t.segment->device;
      lt.cuda_ordinal = t.ordinal;
      lt.memory = t.memory;
      lt.data = t.base + (file.data_offset() + info.begin - t.segment->file_begin);
      lt.owner = t.owner;
      tensors.push_back(std::move(lt));
    }
  }
  return tensors;
}

}  // namespace phx::safetensors::stage
