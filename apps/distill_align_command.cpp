#include "apps/distill_align_command.h"

#include <iostream>
#include <memory>

#include "distill/xtoken/alignment_report.h"

namespace retort::apps {

void add_distill_align_verb(CLI::App& distill) {
  struct Args {
    distill::xtoken::AlignmentReportRequest request;
    std::string text;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = distill.add_subcommand(
      "align", "align two tokenizers' readings of a text: chunk shapes, share of tokens aligned, characters/s");
  cmd->add_option("--student-tokenizer", args->request.student_tokenizer,
                  "the student's tokenizer (.model or tokenizer.json)")
      ->required();
  cmd->add_option("--teacher-tokenizer", args->request.teacher_tokenizer,
                  "the teacher's tokenizer (.model or tokenizer.json)")
      ->required();
  cmd->add_option("--text", args->text, "one text file, aligned whole");
  cmd->add_option("--corpus", args->request.corpus,
                  "a corpus like data.corpus (a file, a folder or a glob), aligned document by document");
  cmd->add_option("--max-bytes", args->request.max_bytes, "align at most this many bytes of text (0: all)");
  cmd->add_flag("--strings", args->request.strings,
                "also align by strings (Needleman-Wunsch) and compare with the offset alignment");
  cmd->add_flag("--json", args->json, "print one JSON object on stdout (logs stay on stderr)");
  cmd->callback([args] {
    args->request.text = args->text;
    const distill::xtoken::AlignmentReport report = distill::xtoken::report_alignment(args->request);
    if (args->json) {
      std::cout << distill::xtoken::alignment_report_json(report).dump() << std::endl;
    } else {
      std::cout << distill::xtoken::format_alignment_report(report);
    }
  });
}

}  // namespace retort::apps
