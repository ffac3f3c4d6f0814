// The CPU (and sim) row's recurrent-layer entries (tensor/ops.h ssm_conv,
// gated_delta_rule; shapes as documented there).
#pragma once
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kvad::cpu {

void ssm_conv(const Tensor& x, const Tensor& w, const Tensor& state, const Tensor& seq, const Tensor& pos,
              const Tensor& out);
void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                      const Tensor& state, const Tensor& seq, const Tensor& pos, const DeltaRuleParams& p,
                      const Tensor& out);

}  // namespace kvad::cpu
