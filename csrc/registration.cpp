// Schemas and CPU kernels of the C++ ops, in the `rhea_kernels` operator namespace.
//
// The public ops (rhea_kernels::turn_scores, ...) are Python custom ops (rhea_kernels/ops.py)
// that dispatch here on CPU; these `cpp_*` ops are their CPU backends. Fake (meta) kernels
// for them are registered from Python in rhea_kernels/_ext.py.
#include "common.h"

namespace rhea_kernels {

at::Tensor turn_scores_cpu(const at::Tensor& vq, const at::Tensor& vk, const std::optional<at::Tensor>& turn_mask,
                           const std::optional<at::Tensor>& center);
std::tuple<at::Tensor, at::Tensor> turn_scores_and_tiers_cpu(const at::Tensor& vq, const at::Tensor& vk,
                                                             const std::optional<at::Tensor>& turn_mask,
                                                             const std::optional<at::Tensor>& center,
                                                             double tau_low, double tau_high);
std::tuple<at::Tensor, at::Tensor> anchored_attention_fwd_cpu(const at::Tensor& q, const at::Tensor& k,
                                                             const at::Tensor& v, const at::Tensor& prefix_len,
                                                             double beta, bool causal, double scale);
std::tuple<at::Tensor, at::Tensor, at::Tensor> anchored_attention_bwd_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& prefix_len, double beta, bool causal, double scale);

TORCH_LIBRARY(rhea_kernels, m) {
  m.def("cpp_turn_scores(Tensor vq, Tensor vk, Tensor? turn_mask, Tensor? center) -> Tensor");
  m.def(
      "cpp_turn_scores_and_tiers(Tensor vq, Tensor vk, Tensor? turn_mask, Tensor? center, float tau_low, "
      "float tau_high) -> (Tensor, Tensor)");
  m.def(
      "cpp_anchored_attention_fwd(Tensor q, Tensor k, Tensor v, Tensor prefix_len, float beta, bool causal, "
      "float scale) -> (Tensor, Tensor)");
  m.def(
      "cpp_anchored_attention_bwd(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "Tensor prefix_len, float beta, bool causal, float scale) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(rhea_kernels, CPU, m) {
  m.impl("cpp_turn_scores", &turn_scores_cpu);
  m.impl("cpp_turn_scores_and_tiers", &turn_scores_and_tiers_cpu);
  m.impl("cpp_anchored_attention_fwd", &anchored_attention_fwd_cpu);
  m.impl("cpp_anchored_attention_bwd", &anchored_attention_bwd_cpu);
}

}  // namespace rhea_kernels

// Importable as the Python module rhea_kernels._C; importing it runs the registrations above.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.doc() = "rhea_kernels C++ CPU ops (registered in torch.ops.rhea_kernels)"; }
