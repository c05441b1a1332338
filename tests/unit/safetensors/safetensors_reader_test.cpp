// SPDX-License-Identifier: MIT
// The safetensors header reader: what it accepts, and each malformed file
// rejected with its errno and a message naming the file and the problem.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "phoenix/safetensors.hpp"
#include "safetensors_test_files.hpp"
#include "test_support.hpp"

namespace st = phx::safetensors;
using phx::test::TestTensor;

namespace {

// Runs read_header on @p path expecting a failure with @p err whose message
// contains the file name and every one of @p words.
void expect_rejected(const std::filesystem::path &path, int err,
                     std::initializer_list<std::string> words) {
  try {
    (void)st::read_header(path);
    ADD_FAILURE() << path << " was accepted";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), err) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find(path.string()), std::string::npos) << what;
    for (const std::string &w : words) {
      EXPECT_NE(what.find(w), std::string::npos) << "\"" << w << "\" not in: " << what;
    }
  }
}

std::string tensor_entry(const std::string &name, const std::string &dtype,
                         const std::string &shape, std::uint64_t begin, std::uint64_t end) {
  return R"(")" + name + R"(":{"dtype":")" + dtype + R"(","shape":)" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// A header of one tensor.  Built by appending: GCC 12 at -O3 warns
// (-Wrestrict, a false positive) on "{" + std::string&& + "}".
std::string one_tensor_header(const std::string &name, const std::string &dtype,
                              const std::string &shape, std::uint64_t begin, std::uint64_t end) {
  std::string json = "{";
  json += tensor_entry(name, dtype, shape, begin, end);
  json += "}";
  return json;
}

// A file whose header is @p json and whose data section has @p data_bytes.
void write_with_header(const std::filesystem::path &path, const std::string &json,
                       std::size_t data_bytes) {
  phx::test::write_raw(path, json.size(), json, phx::test::tensor_bytes(data_bytes, 1));
}

}  // namespace

TEST(SafetensorsReader, ReadsEveryDtypeShapeOffsetAndMetadata) {
  const phx::test::TempDir dir;
  const std::vector<std::pair<std::string, std::size_t>> dtypes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},
      {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8},     {"F64", 8}};
  std::vector<TestTensor> tensors;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    const auto &[dtype, size] = dtypes[i];
    tensors.push_back({std::string("t") + std::to_string(i),
                       dtype,
                       {2, 3},
                       phx::test::tensor_bytes(6 * size, i)});
  }
  tensors.push_back({"scalar", "F32", {}, phx::test::tensor_bytes(4, 99)});
  tensors.push_back({"empty", "F16", {0, 7}, {}});
  const auto path = dir / "all.safetensors";
  const auto offsets =
      phx::test::write_safetensors(path, tensors, 3, {{"format", "pt"}, {"note", "x"}});

  const st::FileHeader h = st::read_header(path);
  EXPECT_EQ(h.path, path);
  EXPECT_EQ(h.file_size, std::filesystem::file_size(path));
  EXPECT_EQ(h.header_size % 8, 0U);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("note"), "x");
  ASSERT_EQ(h.tensors.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const st::TensorInfo *t = h.find(tensors[i].name);
    ASSERT_NE(t, nullptr) << tensors[i].name;
    EXPECT_EQ(st::to_string(t->dtype), tensors[i].dtype);
    EXPECT_EQ(t->shape, tensors[i].shape);
    EXPECT_EQ(t->begin, offsets[i].first);
    EXPECT_EQ(t->end, offsets[i].second);
  }
  for (std::size_t i = 1; i < h.tensors.size(); ++i) {
    EXPECT_LE(h.tensors[i - 1].begin, h.tensors[i].begin) << "tensors sorted by offset";
  }
  EXPECT_EQ(h.find("absent"), nullptr);
}

// safetensors 0.8's dtypes beyond the byte-sized ones: F4 and F6 are
// packed (their bytes are shape x bits / 8, which must be whole), C64 is
// two F32s, the F8 variants one byte each.
TEST(SafetensorsReader, ReadsPackedAndNewerDtypes) {
  const phx::test::TempDir dir;
  const std::vector<std::tuple<std::string, std::string, std::uint64_t>> accepted = {
      {"F4", "[2,4]", 4},        {"F4", "[6]", 3},        {"F6_E2M3", "[4]", 3},
      {"F6_E3M2", "[2,4]", 6},   {"F8_E8M0", "[2,2]", 4}, {"F8_E4M3FNUZ", "[3]", 3},
      {"F8_E5M2FNUZ", "[3]", 3}, {"C64", "[2]", 16},      {"F4", "[0,3]", 0}};
  for (const auto &[dtype, shape, bytes] : accepted) {
    const auto path = dir / (dtype + shape + ".safetensors");
    write_with_header(path, one_tensor_header("t", dtype, shape, 0, bytes), bytes);
    const st::FileHeader h = st::read_header(path);
    ASSERT_EQ(h.tensors.size(), 1U) << dtype;
    EXPECT_EQ(st::to_string(h.tensors[0].dtype), dtype);
    EXPECT_EQ(h.tensors[0].size(), bytes) << dtype << shape;
  }
  // Elements that end inside a byte: refused, as safetensors refuses them.
  const auto odd = dir / "odd.safetensors";
  write_with_header(odd, one_tensor_header("t", "F4", "[3]", 0, 2), 2);
  expect_rejected(odd, EINVAL, {"\"t\"", "F4", "12 bits", "whole number of bytes"});
  const auto six = dir / "six.safetensors";
  write_with_header(six, one_tensor_header("t", "F6_E2M3", "[2]", 0, 2), 2);
  expect_rejected(six, EINVAL, {"F6_E2M3", "12 bits"});
  const auto wrong = dir / "wrong.safetensors";
  write_with_header(wrong, one_tensor_header("t", "C64", "[2]", 0, 8), 8);
  expect_rejected(wrong, EINVAL, {"C64", "16 bytes", "span 8"});
  EXPECT_EQ(st::bit_size(st::Dtype::f4), 4U);
  EXPECT_EQ(st::bit_size(st::Dtype::f6_e3m2), 6U);
  EXPECT_EQ(st::bit_size(st::Dtype::c64), 64U);
  EXPECT_EQ(st::element_size(st::Dtype::c64), 8U);
  EXPECT_EQ(st::element_size(st::Dtype::f4), 0U);  // not a whole byte
}

// safetensors' writer orders tensors by its dtype list, largest alignment
// first: all_dtypes() is that list, ascending.
TEST(SafetensorsReader, AllDtypesInSafetensorsOrder) {
  std::vector<std::string> names;
  for (const st::Dtype d : st::all_dtypes()) {
    names.emplace_back(st::to_string(d));
    EXPECT_EQ(st::parse_dtype(names.back()), d);
  }
  const std::vector<std::string> expected = {
      "BOOL",    "F4",          "F6_E2M3",     "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
      "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",     "U16", "F16", "BF16",    "I32",
      "U32",     "F32",         "C64",         "F64",     "I64", "U64"};
  EXPECT_EQ(names, expected);
}

// A file held in memory (safetensors' load(bytes)) gets read_header's checks.
TEST(SafetensorsReader, ParsesAWholeFileInMemory) {
  const std::string json = one_tensor_header("w", "F32", "[2]", 0, 8);
  std::vector<std::byte> data(8 + json.size() + 8);
  for (std::size_t i = 0; i < 8; ++i) {
    data.at(i) = static_cast<std::byte>((json.size() >> (8 * i)) & 0xff);
  }
  for (std::size_t i = 0; i < json.size(); ++i) {
    data.at(8 + i) = static_cast<std::byte>(json[i]);
  }
  const st::FileHeader h = st::parse_file(data, "<bytes>");
  ASSERT_EQ(h.tensors.size(), 1U);
  EXPECT_EQ(h.data_offset(), 8 + json.size());
  EXPECT_EQ(h.tensors[0].size(), 8U);
  for (const std::size_t cut : {std::size_t{5}, data.size() - 1}) {
    try {
      (void)st::parse_file(std::span(data).first(cut), "<bytes>");
      ADD_FAILURE() << cut << " bytes accepted";
    } catch (const std::system_error &e) {
      EXPECT_EQ(e.code().value(), cut < 8 ? EINVAL : EOVERFLOW) << e.what();
      EXPECT_NE(std::string(e.what()).find("<bytes>"), std::string::npos);
    }
  }
}

TEST(SafetensorsReader, DtypeNamesSizesAndUnknownNames) {
  EXPECT_EQ(st::parse_dtype("BF16"), st::Dtype::bf16);
  EXPECT_EQ(st::element_size(st::Dtype::bf16), 2U);
  EXPECT_EQ(st::element_size(st::Dtype::f64), 8U);
  EXPECT_EQ(st::to_string(st::Dtype::f8_e5m2), "F8_E5M2");
  try {
    (void)st::parse_dtype("bf16");  // names are case sensitive
    ADD_FAILURE() << "lower-case dtype accepted";
  } catch (const std::system_error &e) {
    EXPECT_EQ(e.code().value(), EINVAL);
  }
}

TEST(SafetensorsReader, TruncatedHeaderLength) {
  const phx::test::TempDir dir;
  const auto path = dir / "short.safetensors";
  phx::test::write_raw(path, 0, "", {});
  std::filesystem::resize_file(path, 5);
  expect_rejected(path, EINVAL, {"truncated", "5 bytes"});
}

TEST(SafetensorsReader, TruncatedHeaderText) {
  const phx::test::TempDir dir;
  const auto path = dir / "cut.safetensors";
  const std::string json = std::string("{") + tensor_entry("w", "F32", "[2]", 0, 8) + "}";
  // The length promises the whole header; the file stops half way through it.
  phx::test::write_raw(path, json.size(), json.substr(0, json.size() / 2), {});
  expect_rejected(path, EOVERFLOW, {"header length", "past the end of the file"});
}

TEST(SafetensorsReader, HeaderLengthPastEndOfFile) {
  const phx::test::TempDir dir;
  const auto path = dir / "long.safetensors";
  phx::test::write_raw(path, 1'000'000, "{}", {});
  expect_rejected(path, EOVERFLOW, {"header length 1000000", "past the end of the file"});
}

TEST(SafetensorsReader, HeaderLengthAboveTheCap) {
  const phx::test::TempDir dir;
  const auto path = dir / "huge.safetensors";
  phx::test::write_raw(path, st::kMaxHeaderSize + 1, "{}", {});
  // Sparse: the file is big enough that only the cap can reject it.
  std::filesystem::resize_file(path, st::kMaxHeaderSize + 64);
  expect_rejected(path, EOVERFLOW, {"above the limit"});
}

TEST(SafetensorsReader, BadJson) {
  const phx::test::TempDir dir;
  const auto path = dir / "json.safetensors";
  write_with_header(path, R"({"w":{"dtype":"F32",})", 0);
  expect_rejected(path, EINVAL, {"not valid JSON"});
  write_with_header(path, "[1,2,3]", 0);
  expect_rejected(path, EINVAL, {"not a JSON object"});
}

TEST(SafetensorsReader, NameGivenTwice) {
  const phx::test::TempDir dir;
  const auto path = dir / "twice.safetensors";
  // JSON parsers keep one of the two; which one depends on the parser.
  write_with_header(path,
                    std::string("{") + tensor_entry("w", "F32", "[2]", 0, 8) + "," +
                        tensor_entry("w", "F32", "[1]", 8, 12) + "}",
                    12);
  expect_rejected(path, EINVAL, {"\"w\" twice"});
  write_with_header(path, R"({"w":{"dtype":"F32","dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                    4);
  expect_rejected(path, EINVAL, {"\"dtype\" twice"});
  // The same key in different objects is no repeat.
  write_with_header(path,
                    std::string("{") + tensor_entry("a", "F32", "[1]", 0, 4) + "," +
                        tensor_entry("b", "F32", "[1]", 4, 8) + "}",
                    8);
  EXPECT_EQ(st::read_header(path).tensors.size(), 2U);
}

TEST(SafetensorsReader, UnknownDtype) {
  const phx::test::TempDir dir;
  const auto path = dir / "dtype.safetensors";
  write_with_header(path, std::string("{") + tensor_entry("w", "F128", "[2]", 0, 32) + "}", 32);
  expect_rejected(path, EINVAL, {"tensor \"w\"", "unknown dtype \"F128\""});
}

TEST(SafetensorsReader, ShapeSizeMismatch) {
  const phx::test::TempDir dir;
  const auto path = dir / "shape.safetensors";
  write_with_header(path, std::string("{") + tensor_entry("w", "F16", "[2,3]", 0, 16) + "}", 16);
  expect_rejected(path, EINVAL, {"tensor \"w\"", "12 bytes", "span 16"});
}

TEST(SafetensorsReader, ShapeOverflow) {
  const phx::test::TempDir dir;
  const auto path = dir / "overflow.safetensors";
  write_with_header(
      path, std::string("{") + tensor_entry("w", "F64", "[4294967296,4294967296]", 0, 8) + "}", 8);
  expect_rejected(path, EOVERFLOW, {"tensor \"w\"", "overflows"});
}

TEST(SafetensorsReader, NegativeOrMalformedFields) {
  const phx::test::TempDir dir;
  const auto path = dir / "fields.safetensors";
  write_with_header(path, std::string("{") + tensor_entry("w", "U8", "[-2]", 0, 2) + "}", 2);
  expect_rejected(path, EINVAL, {"tensor \"w\"", "shape", "not a non-negative integer"});
  write_with_header(path, R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", 2);
  expect_rejected(path, EINVAL, {"tensor \"w\"", "data_offsets"});
  write_with_header(path, std::string("{") + tensor_entry("w", "U8", "[0]", 4, 2) + "}", 4);
  expect_rejected(path, EINVAL, {"tensor \"w\"", "end before they begin"});
}

TEST(SafetensorsReader, OffsetsOutOfBounds) {
  const phx::test::TempDir dir;
  const auto path = dir / "bounds.safetensors";
  write_with_header(path,
                    std::string("{") + tensor_entry("a", "F32", "[2]", 0, 8) + "," +
                        tensor_entry("b", "F32", "[4]", 8, 24) + "}",
                    20);
  expect_rejected(path, EOVERFLOW, {"tensor \"b\"", "[8, 24)", "data section (20 bytes)"});
}

TEST(SafetensorsReader, OverlappingTensors) {
  const phx::test::TempDir dir;
  const auto path = dir / "overlap.safetensors";
  write_with_header(path,
                    std::string("{") + tensor_entry("a", "F32", "[4]", 0, 16) + "," +
                        tensor_entry("b", "F32", "[2]", 12, 20) + "}",
                    20);
  expect_rejected(path, EINVAL, {"tensor \"b\"", "overlap tensor \"a\""});
}

TEST(SafetensorsReader, EmptyTensorsOverlapNothing) {
  const phx::test::TempDir dir;
  const auto path = dir / "empty.safetensors";
  write_with_header(path,
                    std::string("{") + tensor_entry("a", "F32", "[4]", 0, 16) + "," +
                        tensor_entry("z", "F32", "[0]", 8, 8) + "}",
                    16);
  const st::FileHeader h = st::read_header(path);
  EXPECT_EQ(h.tensors.size(), 2U);
}

TEST(SafetensorsReader, MetadataMustMapStringsToStrings) {
  const phx::test::TempDir dir;
  const auto path = dir / "meta.safetensors";
  write_with_header(path, R"({"__metadata__":{"format":1}})", 0);
  expect_rejected(path, EINVAL, {"__metadata__", "\"format\""});
  write_with_header(path, R"({"__metadata__":["pt"]})", 0);
  expect_rejected(path, EINVAL, {"__metadata__"});
}

TEST(SafetensorsReader, MissingFileIsEnoent) {
  const phx::test::TempDir dir;
  expect_rejected(dir / "absent.safetensors", ENOENT, {"cannot open"});
}

TEST(SafetensorsReader, AFifoIsRefusedWithoutWaitingForAWriter) {
  const phx::test::TempDir dir;
  const auto fifo = dir / "fifo.safetensors";
  EXPECT_TRUE(phx::test::returns_without_a_fifo_writer(
      fifo, [&] { expect_rejected(fifo, EINVAL, {"not a regular file"}); }))
      << "read_header(" << fifo << ") waited for a writer";
}

TEST(SafetensorsReader, ADirectoryIsNotAFile) {
  const phx::test::TempDir dir;
  expect_rejected(dir.path(), EINVAL, {"not a regular file"});
}
