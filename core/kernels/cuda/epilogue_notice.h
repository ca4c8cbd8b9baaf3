#pragma once
// Reports (once per distinct description) that a fused cuBLASLt epilogue fell back to separate kernels, so a
// benchmark's log shows when the fused path is not the one that ran. Implemented in kernels/epilogue_notice.cpp.
#include <string>

namespace retort::kernels::cuda::detail {

void note_epilogue_fallback(const std::string& what);

}  // namespace retort::kernels::cuda::detail
