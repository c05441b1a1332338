// SPDX-License-Identifier: MIT
// Writing safetensors files byte for byte as the format defines them (an
// 8-byte little-endian header length, the JSON header padded with spaces,
// the data section), independently of the reader under test.
#ifndef PHOENIX_TESTS_SAFETENSORS_TEST_FILES_HPP
#define PHOENIX_TESTS_SAFETENSORS_TEST_FILES_HPP

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace phx::test {

struct TestTensor {
  std::string name;
  std::string dtype;  ///< as written into the header, valid or not
  std::vector<std::uint64_t> shape;
  std::vector<std::byte> data;
};

/// @p count pattern bytes (seed and index recoverable).
[[nodiscard]] std::vector<std::byte> tensor_bytes(std::size_t count, std::uint64_t seed);

/// Where each tensor's bytes went in the data section.
using Offsets = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

/// Lays the tensors out in order, each after @p gap bytes of filler (a gap
/// makes offsets unaligned), and writes the file.  Returns the offsets.
Offsets write_safetensors(const std::filesystem::path &path, const std::vector<TestTensor> &tensors,
                          std::size_t gap = 0,
                          const std::map<std::string, std::string> &metadata = {});

/// The JSON header for @p tensors at @p offsets.
[[nodiscard]] std::string header_text(const std::vector<TestTensor> &tensors,
                                      const Offsets &offsets,
                                      const std::map<std::string, std::string> &metadata = {});

/// Writes @p length_field, then @p header, then @p data as they are: for
/// malformed files.
void write_raw(const std::filesystem::path &path, std::uint64_t length_field,
               const std::string &header, const std::vector<std::byte> &data);

/// Writes a model.safetensors.index.json mapping each tensor to its file.
void write_index(const std::filesystem::path &path,
                 const std::vector<std::pair<std::string, std::string>> &weight_map);

}  // namespace phx::test

#endif  // PHOENIX_TESTS_SAFETENSORS_TEST_FILES_HPP
