// safetensors: round trips of every dtype, interchange with an independent writer and reader (Python's
// standard library, byte by byte from the format description), and clear errors for corrupt files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort {
namespace {

using ::retort::testing::message_of;
using ::retort::testing::TempFolder;

template <typename T>
Tensor tensor_of(const std::vector<T>& values, const Shape& shape, DType dtype) {
  Tensor tensor = Tensor::empty(shape, dtype, Device::cpu());
  EXPECT_EQ(tensor.nbytes(), values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(tensor.raw_data(), values.data(), tensor.nbytes());
  return tensor;
}

std::string bytes_of(const Tensor& tensor) {
  return std::string(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
}

class SafetensorsTest : public ::testing::Test {
 protected:
  // A file with a hand-written header and buffer, for the corrupt cases.
  std::filesystem::path raw_file(const std::string& name, const std::string& header, const std::string& buffer,
                                 std::optional<uint64_t> declared_length = std::nullopt) {
    std::string bytes(8, '\0');
    const uint64_t length = declared_length.value_or(header.size());
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
    const auto path = folder_.path() / name;
    write_file_atomic(path, bytes + header + buffer);
    return path;
  }

  // The message of loading `path`, which must fail with an InputError; a failure names the file.
  std::string load_error(const std::filesystem::path& path) {
    SCOPED_TRACE("loading " + path.string());
    return message_of([&] { load_safetensors(path); });
  }

  TempFolder folder_;
};

TEST_F(SafetensorsTest, RoundTripAllDtypesScalarsEmptiesAndMetadata) {
  const NamedTensors tensors = {
      {"weight.f32", tensor_of<float>({1.5f, -2.25f, 3e-8f, 1e30f, -0.0f, 7.0f}, {2, 3}, DType::F32)},
      {"weight.bf16", tensor_of<uint16_t>({0x3f80, 0xc000, 0x7f80, 0x0001}, {4}, DType::BF16)},
      {"tokens", tensor_of<int32_t>({-1, 0, 2147483647, -2147483647 - 1}, {2, 1, 2}, DType::I32)},
      {"reference", tensor_of<double>({3.141592653589793, -1e-300}, {2}, DType::F64)},
      {"scalar", tensor_of<float>({42.0f}, {}, DType::F32)},
      {"empty", tensor_of<float>({}, {0, 5}, DType::F32)},
      {"empty.i32", tensor_of<int32_t>({}, {0}, DType::I32)},
      {"scalar.f64", tensor_of<double>({-0.5}, {}, DType::F64)},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "120"}, {"unicode", "µ—ok"}};
  const auto path = folder_.path() / "model.safetensors";
  save_safetensors(path, tensors, metadata);

  const SafetensorsFile loaded = load_safetensors(path);
  EXPECT_EQ(loaded.metadata, metadata);
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, expected] = tensors[i];
    const auto& [loaded_name, actual] = loaded.tensors[i];
    EXPECT_EQ(loaded_name, name);  // file order is the order given
    EXPECT_EQ(actual.dtype(), expected.dtype()) << name;
    EXPECT_EQ(actual.shape(), expected.shape()) << name;
    EXPECT_TRUE(actual.device().is_cpu());
    EXPECT_EQ(bytes_of(actual), bytes_of(expected)) << name;
  }
  EXPECT_EQ(loaded.get("scalar").ndim(), 0);
  EXPECT_TRUE(loaded.contains("empty"));

  // The data buffer starts 8-byte aligned, as the format asks.
  const SafetensorsHeader header = read_safetensors_header(path);
  EXPECT_EQ(header.data_start % 8, 0u);
  EXPECT_EQ(header.data_start + header.data_size, std::filesystem::file_size(path));
}

TEST_F(SafetensorsTest, ViewsSaveOnlyTheirOwnElements) {
  const Tensor matrix = tensor_of<int32_t>({1, 2, 3, 4, 5, 6}, {3, 2}, DType::I32);
  const auto path = folder_.path() / "view.safetensors";
  save_safetensors(path, {{"middle_row", matrix.rows(1, 1)}, {"flat", matrix.view({6})}});
  const SafetensorsFile file = load_safetensors(path);
  const Tensor& row = file.get("middle_row");
  ASSERT_EQ(row.shape(), (Shape{1, 2}));
  EXPECT_EQ(row.data<int32_t>()[0], 3);
  EXPECT_EQ(row.data<int32_t>()[1], 4);
  EXPECT_EQ(bytes_of(file.get("flat")), bytes_of(matrix));
}

TEST_F(SafetensorsTest, MissingTensorSuggestsAName) {
  const auto path = folder_.path() / "a.safetensors";
  save_safetensors(path, {{"layers.0.weight", tensor_of<float>({1}, {1}, DType::F32)}});
  const std::string message = message_of([&] { load_safetensors(path).get("layers.0.wieght"); });
  EXPECT_NE(message.find("did you mean 'layers.0.weight'"), std::string::npos) << message;
}

TEST_F(SafetensorsTest, SaveRejectsDuplicateAndReservedNames) {
  const Tensor t = tensor_of<float>({1}, {1}, DType::F32);
  EXPECT_THROW(save_safetensors(folder_.path() / "d.safetensors", {{"x", t}, {"x", t}}), Error);
  EXPECT_THROW(save_safetensors(folder_.path() / "m.safetensors", {{"__metadata__", t}}), Error);
  EXPECT_FALSE(std::filesystem::exists(folder_.path() / "d.safetensors"));
}

// Python's standard library stands in for an independent implementation of the format.
bool have_python() {
  return std::filesystem::exists(RETORT_PYTHON);
}

int run_python(const std::filesystem::path& script, const std::filesystem::path& argument) {
  const std::string command = std::string(RETORT_PYTHON) + " '" + script.string() + "' '" + argument.string() + "'";
  return std::system(command.c_str());
}

TEST_F(SafetensorsTest, ReadsAFileWrittenByAnIndependentWriter) {
  RETORT_REQUIRE_ORACLE(have_python(), RETORT_PYTHON " is not installed");
  const auto script = folder_.path() / "writer.py";
  std::ofstream(script) << R"PY(
import json, struct, sys
tensors = [
    ("b.f64", "F64", [3], struct.pack("<3d", 0.1, -2.5, 1e-310)),
    ("a.f32", "F32", [2, 2], struct.pack("<4f", 1.0, -0.5, 0.25, 1024.0)),
    ("c.bf16", "BF16", [3], struct.pack("<3H", 0x3F80, 0xBFC0, 0x4049)),
    ("d.i32", "I32", [], struct.pack("<i", -7)),
    ("e.empty", "F32", [2, 0], b""),
]
header, buffer = {"__metadata__": {"source": "python"}}, b""
for name, dtype, shape, data in tensors:
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(buffer), len(buffer) + len(data)]}
    buffer += data
text = json.dumps(header).encode("utf-8")
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + buffer)
)PY";
  const auto path = folder_.path() / "python.safetensors";
  ASSERT_EQ(run_python(script, path), 0);

  const SafetensorsFile file = load_safetensors(path);
  EXPECT_EQ(file.metadata.at("source"), "python");
  ASSERT_EQ(file.tensors.size(), 5u);
  EXPECT_EQ(file.tensors[0].first, "b.f64");  // header order, not sorted
  EXPECT_EQ(file.tensors[1].first, "a.f32");

  const Tensor& f64 = file.get("b.f64");
  ASSERT_EQ(f64.dtype(), DType::F64);
  EXPECT_EQ(f64.data<double>()[0], 0.1);
  EXPECT_EQ(f64.data<double>()[1], -2.5);
  EXPECT_EQ(f64.data<double>()[2], 1e-310);

  const Tensor& f32 = file.get("a.f32");
  ASSERT_EQ(f32.shape(), (Shape{2, 2}));
  EXPECT_EQ(std::vector<float>(f32.data<float>(), f32.data<float>() + 4),
            (std::vector<float>{1.0f, -0.5f, 0.25f, 1024.0f}));

  const Tensor& bf16 = file.get("c.bf16");
  ASSERT_EQ(bf16.dtype(), DType::BF16);
  EXPECT_EQ(static_cast<float>(bf16.data<BFloat16>()[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(bf16.data<BFloat16>()[1]), -1.5f);
  EXPECT_EQ(static_cast<float>(bf16.data<BFloat16>()[2]), 3.140625f);

  const Tensor& i32 = file.get("d.i32");
  EXPECT_EQ(i32.ndim(), 0);
  EXPECT_EQ(i32.data<int32_t>()[0], -7);
  EXPECT_EQ(file.get("e.empty").shape(), (Shape{2, 0}));
}

TEST_F(SafetensorsTest, AnIndependentReaderReadsOurFile) {
  RETORT_REQUIRE_ORACLE(have_python(), RETORT_PYTHON " is not installed");
  const auto path = folder_.path() / "ours.safetensors";
  save_safetensors(path,
                   {{"w", tensor_of<float>({0.5f, -1.0f, 2.0f}, {3}, DType::F32)},
                    {"h", tensor_of<uint16_t>({0x3f80, 0x4000}, {1, 2}, DType::BF16)},
                    {"ids", tensor_of<int32_t>({5, -6}, {2}, DType::I32)},
                    {"x", tensor_of<double>({1.0 / 3.0}, {}, DType::F64)},
                    {"nothing", tensor_of<float>({}, {0}, DType::F32)}},
                   {{"step", "9"}});
  const auto script = folder_.path() / "reader.py";
  std::ofstream(script) << R"PY(
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
assert (8 + n) % 8 == 0, "buffer not 8-byte aligned"
header = json.loads(data[8:8 + n].decode("utf-8"))
buffer = data[8 + n:]
assert header.pop("__metadata__") == {"step": "9"}
sizes = {"F32": 4, "BF16": 2, "I32": 4, "F64": 8}
def payload(name, dtype, shape):
    entry = header[name]
    assert entry["dtype"] == dtype and entry["shape"] == shape, (name, entry)
    begin, end = entry["data_offsets"]
    count = 1
    for d in shape: count *= d
    assert end - begin == count * sizes[dtype], (name, entry)
    return buffer[begin:end]
assert struct.unpack("<3f", payload("w", "F32", [3])) == (0.5, -1.0, 2.0)
assert struct.unpack("<2H", payload("h", "BF16", [1, 2])) == (0x3F80, 0x4000)
assert struct.unpack("<2i", payload("ids", "I32", [2])) == (5, -6)
assert struct.unpack("<d", payload("x", "F64", [])) == (1.0 / 3.0,)
assert payload("nothing", "F32", [0]) == b""
assert list(header) == ["w", "h", "ids", "x", "nothing"], list(header)
assert max(e["data_offsets"][1] for e in header.values()) == len(buffer)
)PY";
  EXPECT_EQ(run_python(script, path), 0);
}

TEST_F(SafetensorsTest, CorruptFilesGiveErrorsNamingTheFile) {
  const std::string good_header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight_bytes(8, '\x01');
  struct Case {
    std::string name;
    std::filesystem::path path;
    std::string expected;
  };
  std::vector<Case> cases;
  {
    const auto path = folder_.path() / "tiny.safetensors";
    write_file_atomic(path, std::string("abc"));
    cases.push_back({"shorter than 8 bytes", path, "shorter than the 8-byte header length"});
  }
  cases.push_back({"header length huge", raw_file("huge.safetensors", good_header, eight_bytes, 1ull << 40),
                   "header length is 1099511627776 bytes"});
  cases.push_back({"truncated buffer", raw_file("truncated.safetensors", good_header, eight_bytes.substr(0, 5)),
                   "beyond the 5-byte data buffer"});
  cases.push_back({"invalid JSON", raw_file("json.safetensors", R"({"t":{"dtype":)", eight_bytes), "not valid JSON"});
  cases.push_back({"not an object", raw_file("array.safetensors", "[1, 2]", ""), "not a JSON object"});
  cases.push_back(
      {"unknown dtype",
       raw_file("dtype.safetensors", R"({"t":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", eight_bytes),
       "dtype 'F17'"});
  cases.push_back(
      {"unsupported dtype",
       raw_file("f8.safetensors", R"({"t":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", eight_bytes),
       "dtype 'F8_E4M3'"});
  cases.push_back(
      {"offsets do not match the shape",
       raw_file("mismatch.safetensors", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight_bytes),
       "needs 12 bytes"});
  cases.push_back(
      {"offsets reversed",
       raw_file("reversed.safetensors", R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight_bytes),
       "end before they begin"});
  cases.push_back({"overlap",
                   raw_file("overlap.safetensors",
                            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            eight_bytes),
                   "overlap"});
  cases.push_back(
      {"gap", raw_file("gap.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight_bytes),
       "belong to no tensor"});
  cases.push_back(
      {"trailing garbage", raw_file("trailing.safetensors", good_header, eight_bytes + "junk"), "trailing data"});
  cases.push_back({"duplicate name",
                   raw_file("duplicate.safetensors",
                            R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            eight_bytes),
                   "lists 't' twice"});
  cases.push_back(
      {"negative offset",
       raw_file("negative.safetensors", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", eight_bytes),
       "non-negative integer"});
  cases.push_back({"metadata not strings", raw_file("metadata.safetensors", R"({"__metadata__":{"step":3}})", ""),
                   "must be a string"});
  cases.push_back({"missing field", raw_file("field.safetensors", R"({"t":{"dtype":"F32","shape":[2]}})", eight_bytes),
                   "has no \"data_offsets\""});

  for (const Case& item : cases) {
    const std::string message = load_error(item.path);
    EXPECT_NE(message.find(item.path.string()), std::string::npos) << item.name << ": " << message;
    EXPECT_NE(message.find(item.expected), std::string::npos) << item.name << ": " << message;
    EXPECT_NE(message.find("corrupt"), std::string::npos) << item.name << ": " << message;
  }
}

TEST_F(SafetensorsTest, MissingFileIsAnInputError) {
  const auto path = folder_.path() / "absent.safetensors";
  EXPECT_NE(load_error(path).find("absent.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace retort
