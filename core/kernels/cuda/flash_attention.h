#pragma once
// The fused causal attention of flash_attention.cu: the contracts of kernels.h's flash_attention_* (checked there),
// on CUDA tensors.
#include <initializer_list>

#include "core/tensor/tensor.h"

namespace retort::kernels::cuda {

// Whether the fused kernels take q in bf16 with this head size (64 or 128) and these tensors' rows as 16-byte
// packs (start aligned, width a multiple of 8).
bool flash_attention_fits(const Tensor& q, int64_t head_dim, std::initializer_list<const Tensor*> parts);
void flash_attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& lse);
void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head, Tensor& out,
                             Tensor& lse);
void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                              Tensor& dqkv);
void flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, int n_head, int n_kv_head, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace retort::kernels::cuda
