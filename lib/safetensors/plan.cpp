// SPDX-License-Identifier: MIT
// Planning a checkpoint's reads.  Each file's tensors bound for one device
// share one destination allocation that mirrors the file: the aligned
// superset of the byte range they cover, so that a tensor's address is the
// allocation's base plus its file offset minus the aligned start.  The file
// is then read with large requests whose offsets, lengths and memory
// addresses are all aligned (O_DIRECT's rule), and no tensor needs its own
// unaligned edge handling; the cost is at most two alignment units of
// neighbouring bytes (header, other tensors) read per allocation.
#include <algorithm>
#include <cerrno>
#include <map>
#include <string>

#include "core/error.hpp"
#include "phoenix/safetensors.hpp"

namespace phx::safetensors {

std::uint64_t LoadPlan::bytes() const noexcept {
  std::uint64_t n = 0;
  for (const Segment &s : segments) {
    n += s.bytes();
  }
  return n;
}

LoadPlan plan_load(const Checkpoint &checkpoint, const LoadOptions &options) {
  const std::size_t align = options.alignment;
  if (align == 0 || (align & (align - 1)) != 0) {
    detail::throw_errno(EINVAL,
                        "load alignment " + std::to_string(align) + " is not a power of two");
  }
  LoadPlan plan;
  plan.alignment = align;
  for (std::size_t f = 0; f < checkpoint.files.size(); ++f) {
    const FileHeader &file = checkpoint.files[f];
    std::map<int, Segment> by_device;
    for (std::size_t t = 0; t < file.tensors.size(); ++t) {
      const TensorInfo &tensor = file.tensors[t];
      const int device = options.devices.device_for(tensor.name);
      auto [it, fresh] = by_device.try_emplace(device);
      Segment &s = it->second;
      const std::uint64_t begin = file.data_offset() + tensor.begin;
      const std::uint64_t end = file.data_offset() + tensor.end;
      if (fresh) {
        s.file = f;
        s.device = device;
        s.file_begin = begin;
        s.file_end = end;
      }
      s.file_begin = std::min(s.file_begin, begin);
      s.file_end = std::max(s.file_end, end);
      s.tensors.push_back(t);
    }
    for (auto &[device, s] : by_device) {
      s.file_begin = s.file_begin / align * align;
      s.file_end = (s.file_end + align - 1) / align * align;
      // Files of empty tensors still get a (small) allocation to point at.
      s.file_end = std::max(s.file_end, s.file_begin + align);
      plan.segments.push_back(std::move(s));
    }
  }
  return plan;
}

}  // namespace phx::safetensors
