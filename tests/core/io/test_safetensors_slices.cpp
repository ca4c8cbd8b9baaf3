// Slices of memory-mapped safetensors files: rows and columns of F32, BF16 and F16 tensors, converted to float32,
// against a file written by an independent writer (Python's struct, whose 'e' format is IEEE half precision), and
// errors naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/io/safetensors.h"
#include "core/io/safetensors_slices.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort {
namespace {

using ::retort::testing::message_of;
using ::retort::testing::TempFolder;

// Python's standard library stands in for an independent writer of the format.
bool have_python() {
  return std::filesystem::exists(RETORT_PYTHON);
}

int run_python(const std::filesystem::path& script, const std::filesystem::path& argument) {
  const std::string command = std::string(RETORT_PYTHON) + " '" + script.string() + "' '" + argument.string() + "'";
  return std::system(command.c_str());
}

TEST(SafetensorsSlices, HalfPrecisionBitsConvertExactly) {
  EXPECT_EQ(f16_bits_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_bits_to_float(0xC000), -2.0f);
  EXPECT_EQ(f16_bits_to_float(0x7BFF), 65504.0f);                      // the largest half
  EXPECT_EQ(f16_bits_to_float(0x0001), std::ldexp(1.0f, -24));         // the smallest subnormal
  EXPECT_EQ(f16_bits_to_float(0x03FF), 1023 * std::ldexp(1.0f, -24));  // the largest subnormal
  EXPECT_EQ(f16_bits_to_float(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::signbit(f16_bits_to_float(0x8000)));
  EXPECT_EQ(f16_bits_to_float(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_bits_to_float(0x7E00)));
}

TEST(SafetensorsSlices, RowsAndColumnsOfEachDtypeFromAnIndependentWriter) {
  RETORT_REQUIRE_ORACLE(have_python(), RETORT_PYTHON " is not installed");
  TempFolder folder;
  const auto script = folder.path() / "writer.py";
  // [3, 4] tensors holding 0.5 * (4 r + c) - 2, exact in every dtype (BF16 by truncating the f32 bits).
  std::ofstream(script) << R"PY(
import json, struct, sys
values = [0.5 * i - 2 for i in range(12)]
f32 = struct.pack("<12f", *values)
bf16 = b"".join(f32[4 * i + 2:4 * i + 4] for i in range(12))
f16 = struct.pack("<12e", *values)
header, buffer = {}, b""
for name, dtype, data in (("w.f16", "F16", f16), ("w.f32", "F32", f32), ("w.bf16", "BF16", bf16)):
    header[name] = {"dtype": dtype, "shape": [3, 4], "data_offsets": [len(buffer), len(buffer) + len(data)]}
    buffer += data
text = json.dumps(header).encode("utf-8")
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + buffer)
)PY";
  const auto path = folder.path() / "slices.safetensors";
  ASSERT_EQ(run_python(script, path), 0);
  const SafetensorsSliceReader reader(path);
  auto value = [](int64_t r, int64_t c) { return 0.5 * (4 * r + c) - 2; };
  for (const char* name : {"w.f16", "w.f32", "w.bf16"}) {
    SCOPED_TRACE(name);
    const Tensor rows = reader.read_f32(name, 0, 1, 2);
    ASSERT_EQ(rows.shape(), (Shape{2, 4}));
    ASSERT_EQ(rows.dtype(), DType::F32);
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(rows.to_doubles()[r * 4 + c], value(r + 1, c));
    const Tensor columns = reader.read_f32(name, 1, 2, 2);
    ASSERT_EQ(columns.shape(), (Shape{3, 2}));
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(columns.to_doubles()[r * 2 + c], value(r, c + 2));
    EXPECT_EQ(reader.read_f32(name).to_doubles().size(), 12u);
  }
  // The whole-file reader converts F16 to float32 too.
  const SafetensorsFile file = load_safetensors(path);
  EXPECT_EQ(file.get("w.f16").dtype(), DType::F32);
  EXPECT_EQ(file.get("w.f16").to_doubles(), reader.read_f32("w.f32").to_doubles());

  const std::string absent = message_of([&] { reader.read_f32("w.f64"); });
  EXPECT_NE(absent.find("no tensor 'w.f64'"), std::string::npos) << absent;
  const std::string outside = message_of([&] { reader.read_f32("w.f32", 0, 2, 2); });
  EXPECT_NE(outside.find("'w.f32'"), std::string::npos) << outside;
  EXPECT_NE(outside.find("outside its shape"), std::string::npos) << outside;
}

}  // namespace
}  // namespace retort
