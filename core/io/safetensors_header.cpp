#include "core/io/safetensors_header.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/util/error.h"

namespace retort {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian; so is every retort target");

using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::array<DType, 4> kDTypes = {DType::F32, DType::BF16, DType::I32, DType::F64};

[[noreturn]] void corrupt(const std::string& file, const std::string& what) {
  throw InputError(
      fmt::format("safetensors file '{}': {}; the file is corrupt, truncated, or not a safetensors file", file, what));
}

uint64_t to_offset(const OrderedJson& value, const std::string& file, const std::string& what) {
  if (!value.is_number_unsigned())
    corrupt(file, fmt::format("{} must be a non-negative integer, got {}", what, value.dump()));
  return value.get<uint64_t>();
}

SafetensorsTensorInfo decode_entry(const std::string& name, const OrderedJson& entry, const std::string& file) {
  if (!entry.is_object()) corrupt(file, fmt::format("the entry of tensor '{}' is not a JSON object", name));
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) corrupt(file, fmt::format("tensor '{}' has no \"{}\"", name, field));
  }
  SafetensorsTensorInfo info;
  info.name = name;

  const OrderedJson& dtype = entry["dtype"];
  if (!dtype.is_string()) corrupt(file, fmt::format("tensor '{}' has a non-string dtype {}", name, dtype.dump()));
  const auto known = std::find_if(kDTypes.begin(), kDTypes.end(), [&](DType candidate) {
    return safetensors_dtype_name(candidate) == dtype.get_ref<const std::string&>();
  });
  if (dtype.get_ref<const std::string&>() == "F16") {
    info.dtype = DType::F32;  // converted on reading (Hugging Face checkpoints stored in half precision)
    info.stored_f16 = true;
  } else if (known == kDTypes.end()) {
    throw InputError(fmt::format(
        "safetensors file '{}': tensor '{}' has dtype '{}', which retort does not read (it reads F32, BF16, F16, I32, "
        "F64); convert the tensor, or check that the file is not corrupt",
        file, name, dtype.get<std::string>()));
  } else {
    info.dtype = *known;
  }

  const OrderedJson& shape = entry["shape"];
  if (!shape.is_array())
    corrupt(file, fmt::format("tensor '{}' has a shape that is not a list: {}", name, shape.dump()));
  // The element count bounds the byte size, so it must not overflow before we compare it with the offsets.
  uint64_t numel = 1;
  bool overflow = false;
  for (const OrderedJson& dim : shape) {
    const uint64_t size = to_offset(dim, file, fmt::format("each dimension of tensor '{}'", name));
    if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
    info.shape.push_back(static_cast<int64_t>(size));
    if (size != 0 && numel > std::numeric_limits<uint64_t>::max() / size) overflow = true;
    numel *= size;
  }
  const uint64_t element = stored_element_size(info);
  if (overflow || numel > std::numeric_limits<uint64_t>::max() / element) {
    corrupt(file, fmt::format("tensor '{}' has an impossibly large shape {}", name, shape.dump()));
  }

  const OrderedJson& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    corrupt(file, fmt::format("tensor '{}' must have \"data_offsets\": [begin, end], got {}", name, offsets.dump()));
  }
  info.begin = to_offset(offsets[0], file, fmt::format("the begin offset of tensor '{}'", name));
  info.end = to_offset(offsets[1], file, fmt::format("the end offset of tensor '{}'", name));
  if (info.end < info.begin) {
    corrupt(file, fmt::format("tensor '{}' has data_offsets [{}, {}] that end before they begin", name, info.begin,
                              info.end));
  }
  if (info.end - info.begin != numel * element) {
    corrupt(file, fmt::format("tensor '{}' ({} {}) needs {} bytes but its data_offsets [{}, {}] span {}", name,
                              dtype.get<std::string>(), shape.dump(), numel * element, info.begin, info.end,
                              info.end - info.begin));
  }
  return info;
}

void check_layout(const std::vector<SafetensorsTensorInfo>& tensors, uint64_t data_size, const std::string& file) {
  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const SafetensorsTensorInfo& info : tensors) {
    if (info.end > data_size) {
      corrupt(file, fmt::format("tensor '{}' has data_offsets [{}, {}] beyond the {}-byte data buffer", info.name,
                                info.begin, info.end, data_size));
    }
    // An empty tensor occupies no bytes, so it can neither overlap nor fill a gap.
    if (info.end > info.begin) by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) { return a->begin < b->begin; });
  uint64_t covered = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const SafetensorsTensorInfo* info : by_offset) {
    if (info->begin < covered) {
      corrupt(file, fmt::format("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", previous->name, previous->begin,
                                previous->end, info->name, info->begin, info->end));
    }
    if (info->begin > covered) {
      corrupt(file, fmt::format("bytes [{}, {}) of the data buffer, before tensor '{}', belong to no tensor", covered,
                                info->begin, info->name));
    }
    covered = info->end;
    previous = info;
  }
  if (covered < data_size) {
    corrupt(file, fmt::format("{} bytes of trailing data follow the last tensor (the tensors end at buffer offset {} "
                              "of {})",
                              data_size - covered, covered, data_size));
  }
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::BF16:
      return "BF16";
    case DType::I32:
      return "I32";
    case DType::F64:
      return "F64";
  }
  return "?";
}

size_t stored_element_size(const SafetensorsTensorInfo& info) {
  return info.stored_f16 ? 2 : dtype_size(info.dtype);
}

std::string encode_safetensors_header(const std::vector<SafetensorsTensorInfo>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  for (const SafetensorsTensorInfo& info : tensors) {
    header[info.name] = {
        {"dtype", safetensors_dtype_name(info.dtype)}, {"shape", info.shape}, {"data_offsets", {info.begin, info.end}}};
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::type_error& error) {
    throw InputError(fmt::format(
        "cannot write a safetensors header: tensor names and metadata must be valid UTF-8 ({})", error.what()));
  }
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string encoded(8, '\0');
  uint64_t length = json.size();
  for (int i = 0; i < 8; ++i) encoded[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return encoded + json;
}

SafetensorsHeader decode_safetensors_header(std::string_view json, uint64_t data_size, const std::string& file) {
  // The parsed object keeps only one value per key, so duplicates must be caught while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  const OrderedJson::parser_callback_t watch_keys = [&](int depth, OrderedJson::parse_event_t event,
                                                        OrderedJson& parsed) {
    if (event == OrderedJson::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second &&
        duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  OrderedJson root;
  try {
    root = OrderedJson::parse(json.begin(), json.end(), watch_keys);
  } catch (const nlohmann::json::exception& error) {
    corrupt(file, fmt::format("the header is not valid JSON ({})", error.what()));
  }
  if (!root.is_object()) corrupt(file, "the header is not a JSON object");
  if (!duplicate.empty()) corrupt(file, fmt::format("the header lists '{}' twice", duplicate));

  SafetensorsHeader header;
  header.data_size = data_size;
  for (const auto& [name, entry] : root.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) corrupt(file, "\"__metadata__\" is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          corrupt(file, fmt::format("metadata '{}' must be a string, got {}", key, value.dump()));
        }
        header.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    header.tensors.push_back(decode_entry(name, entry, file));
  }
  check_layout(header.tensors, data_size, file);
  return header;
}

}  // namespace retort
