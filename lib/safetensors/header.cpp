// SPDX-License-Identifier: MIT
// Reading and validating a safetensors header: 8 bytes of little-endian
// length, then that many bytes of JSON mapping tensor names to dtype, shape
// and data offsets relative to the data section that follows.  Everything a
// later read trusts (sizes, bounds, no overlap) is checked here once.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "phoenix/safetensors.hpp"
#include "safetensors/strict_json.hpp"
#include "safetensors/unique_fd.hpp"

namespace phx::safetensors {
namespace {

using nlohmann::json;

[[noreturn]] void fail(int err, const std::filesystem::path &path, const std::string &problem) {
  detail::throw_errno(err, path.string() + ": " + problem);
}

[[noreturn]] void fail_tensor(int err, const std::filesystem::path &path, const std::string &name,
                              const std::string &problem) {
  fail(err, path, "tensor \"" + name + "\": " + problem);
}

std::uint64_t to_u64(const json &value, const std::filesystem::path &path, const std::string &name,
                     const char *field) {
  if (!value.is_number_unsigned()) {
    // nlohmann reports non-negative literals as unsigned; anything else is
    // negative, fractional or not a number.
    fail_tensor(EINVAL, path, name,
                std::string(field) + " holds " + value.dump() + ", not a non-negative integer");
  }
  return value.get<std::uint64_t>();
}

TensorInfo parse_tensor(const std::string &name, const json &entry,
                        const std::filesystem::path &path) {
  if (!entry.is_object()) {
    fail_tensor(EINVAL, path, name, "entry is not a JSON object");
  }
  TensorInfo t;
  t.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) {
    fail_tensor(EINVAL, path, name, "no \"dtype\" string");
  }
  try {
    t.dtype = parse_dtype(dtype->get<std::string>());
  } catch (const std::system_error &e) {
    fail_tensor(EINVAL, path, name, e.what());
  }
  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) {
    fail_tensor(EINVAL, path, name, "no \"shape\" array");
  }
  // Counted in bits: F4 and F6 pack elements across bytes.
  std::uint64_t bits = bit_size(t.dtype);
  bool overflow = false;
  for (const json &dim : *shape) {
    const std::uint64_t d = to_u64(dim, path, name, "shape");
    t.shape.push_back(d);
    if (d != 0 && bits > std::numeric_limits<std::uint64_t>::max() / d) {
      overflow = true;
    }
    bits *= d;
  }
  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    fail_tensor(EINVAL, path, name, "no \"data_offsets\" pair");
  }
  t.begin = to_u64((*offsets)[0], path, name, "data_offsets");
  t.end = to_u64((*offsets)[1], path, name, "data_offsets");
  if (t.end < t.begin) {
    fail_tensor(EINVAL, path, name,
                "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                    ") end before they begin");
  }
  if (overflow) {
    fail_tensor(EOVERFLOW, path, name, "shape's bit count overflows 64 bits");
  }
  if (bits % 8 != 0) {
    fail_tensor(EINVAL, path, name,
                "shape and dtype " + std::string(to_string(t.dtype)) + " make " +
                    std::to_string(bits) + " bits, not a whole number of bytes");
  }
  const std::uint64_t bytes = bits / 8;
  if (bytes != t.size()) {
    fail_tensor(EINVAL, path, name,
                "shape and dtype " + std::string(to_string(t.dtype)) + " make " +
                    std::to_string(bytes) + " bytes but data_offsets span " +
                    std::to_string(t.size()));
  }
  return t;
}

std::map<std::string, std::string> parse_metadata(const json &value,
                                                  const std::filesystem::path &path) {
  if (!value.is_object()) {
    fail(EINVAL, path, "\"__metadata__\" is not an object of strings");
  }
  std::map<std::string, std::string> metadata;
  for (const auto &[key, item] : value.items()) {
    if (!item.is_string()) {
      fail(EINVAL, path, R"("__metadata__" value of ")" + key + R"(" is not a string)");
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

}  // namespace

const TensorInfo *FileHeader::find(std::string_view name) const noexcept {
  for (const TensorInfo &t : tensors) {
    if (t.name == name) {
      return &t;
    }
  }
  return nullptr;
}

FileHeader parse_header(std::string_view text, std::uint64_t file_size,
                        const std::filesystem::path &path) {
  FileHeader header;
  header.path = path;
  header.file_size = file_size;
  header.header_size = text.size();
  if (file_size < 8 || text.size() > file_size - 8) {
    fail(EOVERFLOW, path,
         "header of " + std::to_string(text.size()) + " bytes does not fit a file of " +
             std::to_string(file_size) + " bytes");
  }
  const std::uint64_t data_size = file_size - header.data_offset();
  detail::StrictJson parsed;
  try {
    parsed = detail::parse_strict_json(text);
  } catch (const json::parse_error &e) {
    fail(EINVAL, path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!parsed.repeated_key.empty()) {
    fail(EINVAL, path, "header names \"" + parsed.repeated_key + "\" twice in one object");
  }
  const json &root = parsed.value;
  if (!root.is_object()) {
    fail(EINVAL, path, "header is not a JSON object");
  }
  for (const auto &[name, entry] : root.items()) {
    if (name == "__metadata__") {
      header.metadata = parse_metadata(entry, path);
      continue;
    }
    TensorInfo t = parse_tensor(name, entry, path);
    if (t.end > data_size) {
      fail_tensor(EOVERFLOW, path, name,
                  "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                      ") pass the end of the data section (" + std::to_string(data_size) +
                      " bytes)");
    }
    header.tensors.push_back(std::move(t));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo &a, const TensorInfo &b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  // Empty tensors occupy no bytes and cannot overlap anything.
  const TensorInfo *previous = nullptr;
  for (const TensorInfo &t : header.tensors) {
    if (t.size() == 0) {
      continue;
    }
    if (previous != nullptr && previous->end > t.begin) {
      fail_tensor(EINVAL, path, t.name,
                  "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                      ") overlap tensor \"" + previous->name + "\" [" +
                      std::to_string(previous->begin) + ", " + std::to_string(previous->end) + ")");
    }
    previous = &t;
  }
  return header;
}

namespace {

// The header length's bounds, read from the first 8 bytes of a file of
// @p file_size bytes (at least 8).
void check_length(std::uint64_t length, std::uint64_t file_size,
                  const std::filesystem::path &path) {
  if (length > file_size - 8) {
    fail(EOVERFLOW, path,
         "header length " + std::to_string(length) + " runs past the end of the file (" +
             std::to_string(file_size) + " bytes)");
  }
  if (length > kMaxHeaderSize) {
    fail(EOVERFLOW, path,
         "header length " + std::to_string(length) + " is above the limit of " +
             std::to_string(kMaxHeaderSize) + " bytes");
  }
}

void check_size(std::uint64_t file_size, const std::filesystem::path &path) {
  if (file_size < 8) {
    fail(EINVAL, path,
         "truncated: " + std::to_string(file_size) +
             " bytes, shorter than the 8-byte header length");
  }
}

std::uint64_t little_endian(const unsigned char *bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    value |= std::uint64_t{bytes[i]} << (8 * i);  // NOLINT(*-pointer-arithmetic)
  }
  return value;
}

}  // namespace

FileHeader parse_file(std::span<const std::byte> data, const std::filesystem::path &path) {
  check_size(data.size(), path);
  const auto *bytes = reinterpret_cast<const unsigned char *>(data.data());  // NOLINT
  const std::uint64_t length = little_endian(bytes);
  check_length(length, data.size(), path);
  const std::string_view text(reinterpret_cast<const char *>(bytes) + 8,  // NOLINT
                              static_cast<std::size_t>(length));
  return parse_header(text, data.size(), path);
}

FileHeader read_header(const std::filesystem::path &path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever.
  const detail::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    fail(errno, path, "cannot open");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    fail(errno, path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    fail(EINVAL, path, "not a regular file (a safetensors checkpoint is one)");
  }
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
  if (const int flags = ::fcntl(fd.get(), F_GETFL); flags >= 0) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg)
    (void)::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  }
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  check_size(file_size, path);
  std::array<unsigned char, 8> length_bytes{};
  detail::read_fully(fd.get(), length_bytes.data(), length_bytes.size(), 0, path);
  const std::uint64_t length = little_endian(length_bytes.data());
  check_length(length, file_size, path);
  std::string text(length, '\0');
  detail::read_fully(fd.get(), text.data(), text.size(), 8, path);
  return parse_header(text, file_size, path);
}

}  // namespace phx::safetensors
