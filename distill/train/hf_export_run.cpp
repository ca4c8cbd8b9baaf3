#include "distill/train/hf_export_run.h"

#include "core/util/error.h"
#include "distill/train/run_tokenizer.h"
#include "distill/train/trained_model.h"
#include "parallel/models/hf_export.h"

namespace retort::distill {

namespace fs = std::filesystem;

HfExportSummary export_run_to_hf(const fs::path& run_dir, const fs::path& out_dir) {
  const TrainedModel trained = load_trained_model(run_dir, Device::cpu());
  HfExportSummary summary;
  summary.checkpoint = trained.checkpoint;
  summary.out_dir = out_dir;
  summary.family = trained.model->config().family;
  RETORT_INPUT_CHECK(!fs::exists(out_dir / "config.json"),
                     "'{}' already holds a config.json: export into a new folder (nothing was written)",
                     out_dir.string());
  summary.tensors = save_hf_folder(*trained.model, out_dir);
  // The run's tokenizer under its own file name: tokenizer.json for a Hugging Face tokenizer, tokenizer.model for a
  // SentencePiece model.
  if (const auto record = read_run_tokenizer_record(run_dir); record && record->file && fs::exists(*record->file)) {
    const fs::path target = out_dir / record->file->filename();
    fs::copy_file(*record->file, target, fs::copy_options::overwrite_existing);
    summary.tokenizer = target;
  }
  return summary;
}

}  // namespace retort::distill
