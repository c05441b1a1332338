// SPDX-License-Identifier: MIT
#include "safetensors_test_files.hpp"

#include <fstream>
#include <stdexcept>

namespace phx::test {
namespace {

void append_le64(std::string &out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xffU));
  }
}

}  // namespace

std::vector<std::byte> tensor_bytes(std::size_t count, std::uint64_t seed) {
  std::vector<std::byte> bytes(count);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (std::size_t i = 0; i < count; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    bytes[i] = static_cast<std::byte>(x & 0xffU);
  }
  return bytes;
}

std::string header_text(const std::vector<TestTensor> &tensors, const Offsets &offsets,
                        const std::map<std::string, std::string> &metadata) {
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += R"("__metadata__":{)";
    for (const auto &[key, value] : metadata) {
      json += first ? "\"" : ",\"";
      json += key;
      json += R"(":")";
      json += value;
      json += '"';
      first = false;
    }
    json += "}";
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TestTensor &t = tensors[i];
    json += json.size() > 1 ? ",\"" : "\"";
    json += t.name;
    json += R"(":{"dtype":")";
    json += t.dtype;
    json += R"(","shape":[)";
    // Appends, not "literal" + std::string: GCC 12's -Wrestrict false
    // positive (bug 105651) on the latter at -O3.
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
      json += d == 0 ? "" : ",";
      json += std::to_string(t.shape[d]);
    }
    json += "],\"data_offsets\":[";
    json += std::to_string(offsets.at(i).first);
    json += ",";
    json += std::to_string(offsets.at(i).second);
    json += "]}";
  }
  json += "}";
  return json;
}

void write_raw(const std::filesystem::path &path, std::uint64_t length_field,
               const std::string &header, const std::vector<std::byte> &data) {
  std::string bytes;
  append_le64(bytes, length_field);
  bytes += header;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.write(reinterpret_cast<const char *>(data.data()),  // NOLINT: byte buffer
            static_cast<std::streamsize>(data.size()));
  if (!out) {
    throw std::runtime_error("writing " + path.string());
  }
}

Offsets write_safetensors(const std::filesystem::path &path, const std::vector<TestTensor> &tensors,
                          std::size_t gap, const std::map<std::string, std::string> &metadata) {
  Offsets offsets;
  std::vector<std::byte> data;
  for (const TestTensor &t : tensors) {
    data.insert(data.end(), gap, std::byte{0x5a});
    offsets.emplace_back(data.size(), data.size() + t.data.size());
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  std::string header = header_text(tensors, offsets, metadata);
  // The format pads the header with spaces to a multiple of 8.
  header.append((8 - header.size() % 8) % 8, ' ');
  write_raw(path, header.size(), header, data);
  return offsets;
}

void write_index(const std::filesystem::path &path,
                 const std::vector<std::pair<std::string, std::string>> &weight_map) {
  std::string json = R"({"metadata":{"total_size":0},"weight_map":{)";
  for (std::size_t i = 0; i < weight_map.size(); ++i) {
    json += i == 0 ? "\"" : ",\"";
    json += weight_map[i].first;
    json += R"(":")";
    json += weight_map[i].second;
    json += '"';
  }
  json += "}}";
  std::ofstream out(path, std::ios::trunc);
  out << json;
  if (!out) {
    throw std::runtime_error("writing " + path.string());
  }
}

}  // namespace phx::test
