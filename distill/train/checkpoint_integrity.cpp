#include "distill/train/checkpoint_integrity.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/data/content_hash.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "distill/train/checkpoint.h"
#include "distill/train/checkpoint_steps.h"

namespace retort::distill {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "manifest.json";

std::vector<fs::path> newest_first(std::vector<fs::path> folders) {
  std::reverse(folders.begin(), folders.end());
  return folders;
}

}  // namespace

void write_checkpoint_manifest(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().filename() != kManifest) paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths)
    files[path.filename().string()] = {{"bytes", fs::file_size(path)}, {"fnv1a64", data::file_content_hash_hex(path)}};
  write_text_atomic(dir / kManifest, nlohmann::json{{"format", "retort-checkpoint"}, {"files", files}}.dump(2));
}

std::string checkpoint_damage(const fs::path& dir) {
  const fs::path manifest_path = dir / kManifest;
  if (!fs::exists(manifest_path)) return {};
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_file(manifest_path));
    if (!manifest.at("files").is_object()) return "manifest.json lists no files";
  } catch (const std::exception& e) {
    return fmt::format("manifest.json is unreadable ({})", e.what());
  }
  for (const auto& [name, record] : manifest.at("files").items()) {
    const fs::path path = dir / name;
    if (!fs::exists(path)) return fmt::format("{} is missing", name);
    const auto bytes = static_cast<uint64_t>(fs::file_size(path));
    const uint64_t recorded_bytes = record.value("bytes", uint64_t{0});
    if (bytes != recorded_bytes)
      return fmt::format("{} holds {} bytes, {} were saved (truncated or overwritten)", name, bytes, recorded_bytes);
    const std::string hash = data::file_content_hash_hex(path);
    const std::string recorded_hash = record.value("fnv1a64", std::string());
    if (hash != recorded_hash)
      return fmt::format("{} has content hash {}, {} was saved (its bytes changed since)", name, hash, recorded_hash);
  }
  return {};
}

void verify_checkpoint(const fs::path& dir) {
  const std::string damage = checkpoint_damage(dir);
  RETORT_INPUT_CHECK(damage.empty(),
                     "checkpoint {} is damaged: {}. Use another checkpoint of the run (--resume falls back to the "
                     "newest intact one; eval and generate take --step), or restore the file",
                     dir.string(), damage);
}

std::optional<fs::path> checkpoint_to_resume(const fs::path& run_dir) {
  const std::optional<fs::path> latest = latest_checkpoint(run_dir);
  if (!latest) return std::nullopt;
  const std::string damage = checkpoint_damage(*latest);
  if (damage.empty()) return latest;
  for (const fs::path& dir : newest_first(checkpoint_step_folders(latest->parent_path()))) {
    if (dir == *latest || !checkpoint_damage(dir).empty()) continue;
    spdlog::warn("the newest checkpoint {} is damaged ({}); resuming from the newest intact one, {}", latest->string(),
                 damage, dir.string());
    return dir;
  }
  throw InputError(fmt::format(
      "--resume: the newest checkpoint {} is damaged ({}) and the run keeps no intact one: restore the file, or "
      "start the run again with --overwrite",
      latest->string(), damage));
}

void clean_interrupted_saves(const fs::path& run_dir) {
  const fs::path root = run_dir / "checkpoints";
  if (!fs::exists(root)) return;
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory() && entry.path().filename().string().starts_with(".")) leftovers.push_back(entry.path());
  for (const fs::path& path : leftovers) {
    const std::string name = path.filename().string();
    // A re-save of a step moves the old folder to .old_step_N before renaming the new one in: a crash between
    // the two leaves the old, complete one here and no step_N.
    if (name.starts_with(".old_step_")) {
      const fs::path original = root / name.substr(std::string(".old_").size());
      if (!fs::exists(original)) {
        fs::rename(path, original);
        spdlog::warn("checkpoints: {} was moved aside by a save that did not finish; restored", original.string());
        continue;
      }
    }
    fs::remove_all(path);
    spdlog::warn("checkpoints: removed {}, left by a save that did not finish", path.string());
  }
}

}  // namespace retort::distill
