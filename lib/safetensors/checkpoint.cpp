// SPDX-License-Identifier: MIT
// From what a user names (a file, a folder, a sharded checkpoint's index) to
// the validated headers of every file, each tensor exactly once.
#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "phoenix/safetensors.hpp"
#include "safetensors/strict_json.hpp"

namespace phx::safetensors {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kIndexSuffix = ".safetensors.index.json";

bool ends_with(const std::string &text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// In a folder, an index is what its name says; a file named explicitly is
// one when it is JSON by name (model.index.json, weights.json): parsing it
// as a .safetensors file would only fail with a misleading error.
bool is_index(const fs::path &path) {
  return ends_with(path.filename().string(), kIndexSuffix);
}

bool is_named_index(const fs::path &path) {
  return path.extension() == ".json";
}

// tensor name -> file, as the index's weight_map says.
std::map<std::string, fs::path> read_index(const fs::path &index) {
  std::ifstream in(index);
  if (!in) {
    detail::throw_errno(ENOENT, index.string() + ": cannot open the index");
  }
  detail::StrictJson parsed;
  try {
    parsed = detail::parse_strict_json(in);
  } catch (const json::parse_error &e) {
    detail::throw_errno(EINVAL, index.string() + ": index is not valid JSON: " + e.what());
  }
  if (!parsed.repeated_key.empty()) {
    detail::throw_errno(EINVAL, index.string() + ": index names \"" + parsed.repeated_key +
                                    "\" twice in one object");
  }
  const json &root = parsed.value;
  const auto map = root.is_object() ? root.find("weight_map") : root.end();
  if (map == root.end() || !map->is_object()) {
    detail::throw_errno(EINVAL, index.string() + ": no \"weight_map\" object");
  }
  std::map<std::string, fs::path> files;
  for (const auto &[name, file] : map->items()) {
    const fs::path relative = file.is_string() ? fs::path(file.get<std::string>()) : fs::path();
    if (relative.empty() || relative.is_absolute() || relative.filename() != relative) {
      detail::throw_errno(EINVAL, index.string() + ": weight_map entry of \"" + name +
                                      "\" is not a file name in the index's folder");
    }
    files.emplace(name, index.parent_path() / relative);
  }
  if (files.empty()) {
    detail::throw_errno(EINVAL, index.string() + ": empty weight_map");
  }
  return files;
}

std::vector<fs::path> index_files(const fs::path &index) {
  std::set<fs::path> unique;
  for (const auto &[name, file] : read_index(index)) {
    unique.insert(file);
  }
  return {unique.begin(), unique.end()};
}

// The index a folder holds, if any; EINVAL when it holds several.
std::optional<fs::path> folder_index(const fs::path &folder) {
  std::vector<fs::path> indexes;
  for (const fs::directory_entry &entry : fs::directory_iterator(folder)) {
    if (entry.is_regular_file() && is_index(entry.path())) {
      indexes.push_back(entry.path());
    }
  }
  if (indexes.size() > 1) {
    std::sort(indexes.begin(), indexes.end());
    detail::throw_errno(EINVAL, folder.string() + ": several *" + std::string(kIndexSuffix) +
                                    " files (" + indexes[0].filename().string() + ", " +
                                    indexes[1].filename().string() + "); name the one to load");
  }
  if (indexes.empty()) {
    return std::nullopt;
  }
  return indexes.front();
}

// The index a path stands for: itself, or the one its folder holds.
std::optional<fs::path> index_of(const fs::path &path) {
  if (fs::is_directory(path)) {
    return folder_index(path);
  }
  if (is_named_index(path)) {
    return path;
  }
  return std::nullopt;
}

// An index promises where each tensor is and that its shards hold nothing
// else: hold it to both, whichever way the checkpoint was named (the
// index, its folder, or a list holding either).
void check_index(const fs::path &index, const Checkpoint &checkpoint,
                 const std::map<fs::path, std::size_t> &file_by_path) {
  const std::map<std::string, fs::path> weight_map = read_index(index);
  std::map<fs::path, std::set<std::string>> named;  // canonical shard -> tensors
  for (const auto &[name, file] : weight_map) {
    const fs::path canonical = fs::weakly_canonical(file);
    const auto it = file_by_path.find(canonical);
    if (it == file_by_path.end() || checkpoint.files[it->second].find(name) == nullptr) {
      detail::throw_errno(EINVAL, index.string() + ": weight_map puts tensor \"" + name + "\" in " +
                                      file.string() + ", which lacks it");
    }
    named[canonical].insert(name);
  }
  for (const auto &[canonical, names] : named) {
    const FileHeader &header = checkpoint.files[file_by_path.at(canonical)];
    for (const TensorInfo &t : header.tensors) {
      if (!names.contains(t.name)) {
        detail::throw_errno(EINVAL, index.string() + ": " + header.path.string() +
                                        " holds tensor \"" + t.name +
                                        "\", which the weight_map does not name");
      }
    }
  }
}

std::vector<fs::path> folder_files(const fs::path &folder) {
  if (const std::optional<fs::path> index = folder_index(folder)) {
    return index_files(*index);
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry &entry : fs::directory_iterator(folder)) {
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") {
      files.push_back(entry.path());
    }
  }
  if (files.empty()) {
    detail::throw_errno(ENOENT, folder.string() + ": no *.safetensors file and no index");
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<fs::path> checkpoint_files(const fs::path &path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    detail::throw_errno(ENOENT, path.string() + ": no such file or folder");
  }
  if (fs::is_directory(status)) {
    return folder_files(path);
  }
  if (is_named_index(path)) {
    return index_files(path);
  }
  return {path};
}

Checkpoint open_checkpoint(std::span<const fs::path> paths) {
  Checkpoint checkpoint;
  std::map<fs::path, std::size_t> file_by_path;  // canonical -> index into checkpoint.files
  std::map<std::string, fs::path> owner;
  std::vector<fs::path> indexes;
  for (const fs::path &path : paths) {
    if (const std::optional<fs::path> index = index_of(path)) {
      indexes.push_back(*index);
    }
    for (const fs::path &file : checkpoint_files(path)) {
      const fs::path canonical = fs::weakly_canonical(file);
      if (file_by_path.contains(canonical)) {
        continue;
      }
      file_by_path.emplace(canonical, checkpoint.files.size());
      FileHeader header = read_header(file);
      for (const TensorInfo &t : header.tensors) {
        const auto [it, inserted] = owner.emplace(t.name, file);
        if (!inserted) {
          detail::throw_errno(EINVAL, "tensor \"" + t.name + "\" is in both " +
                                          it->second.string() + " and " + file.string());
        }
      }
      checkpoint.files.push_back(std::move(header));
    }
  }
  for (const fs::path &index : indexes) {
    check_index(index, checkpoint, file_by_path);
  }
  if (checkpoint.files.empty()) {
    detail::throw_errno(ENOENT, "no safetensors file to load");
  }
  return checkpoint;
}

Checkpoint open_checkpoint(const fs::path &path) {
  return open_checkpoint(std::span(&path, 1));
}

Checkpoint select_tensors(Checkpoint checkpoint, std::span<const std::string> names) {
  std::set<std::string_view> wanted(names.begin(), names.end());
  std::set<std::string_view> found;
  std::vector<FileHeader> kept;
  for (FileHeader &file : checkpoint.files) {
    std::erase_if(file.tensors, [&](const TensorInfo &t) { return !wanted.contains(t.name); });
    for (const TensorInfo &t : file.tensors) {
      found.insert(t.name);
    }
    if (!file.tensors.empty()) {
      kept.push_back(std::move(file));
    }
  }
  for (const std::string_view name : wanted) {
    if (!found.contains(name)) {
      detail::throw_errno(EINVAL,
                          "tensor \"" + std::string(name) + "\" is in no file of the checkpoint");
    }
  }
  checkpoint.files = std::move(kept);
  return checkpoint;
}

std::size_t Checkpoint::tensor_count() const noexcept {
  std::size_t n = 0;
  for (const FileHeader &f : files) {
    n += f.tensors.size();
  }
  return n;
}

std::uint64_t Checkpoint::tensor_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const FileHeader &f : files) {
    for (const TensorInfo &t : f.tensors) {
      n += t.size();
    }
  }
  return n;
}

int DeviceMap::device_for(std::string_view tensor_name) const {
  int device = default_device;
  std::size_t best = 0;
  bool matched = false;
  for (const auto &[prefix, dev] : prefixes) {
    const bool matches = tensor_name.starts_with(prefix) &&
                         (tensor_name.size() == prefix.size() || tensor_name[prefix.size()] == '.');
    if (matches && (!matched || prefix.size() > best)) {
      device = dev;
      best = prefix.size();
      matched = true;
    }
  }
  return device;
}

DeviceMap DeviceMap::parse(std::string_view text, int default_device) {
  DeviceMap map;
  map.default_device = default_device;
  std::stringstream items{std::string(text)};
  std::string item;
  const auto to_device = [&](const std::string &value) {
    std::size_t used = 0;
    int dev = -1;
    try {
      dev = std::stoi(value, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    if (used != value.size() || value.empty() || dev < 0) {
      detail::throw_errno(
          EINVAL, "device map \"" + std::string(text) + "\": \"" + value + "\" is not a device id");
    }
    return dev;
  };
  while (std::getline(items, item, ',')) {
    const std::size_t eq = item.rfind('=');
    if (eq == std::string::npos) {
      map.default_device = to_device(item);
    } else {
      map.prefixes.emplace_back(item.substr(0, eq), to_device(item.substr(eq + 1)));
    }
  }
  return map;
}

}  // namespace phx::safetensors
