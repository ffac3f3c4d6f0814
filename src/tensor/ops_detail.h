// Internal to the op layer (tensor/ops.cpp and its siblings, ops_image.cpp):
// the checks every op makes before it calls its row, and the errors they
// throw (ops.h: kvad::Error naming the op and the shapes).
#pragma once
#include <initializer_list>
#include <string>

#include "base/error.h"
#include "tensor/ops.h"

namespace kvad::ops::detail {

[[noreturn]] inline void fail(const char* op, const std::string& why) { throw Error(std::string(op) + ": " + why); }

inline const BackendOps& row(Device d, const char* op) {
  const BackendOps* r = find_backend(d.type);
  if (!r) fail(op, "no kernels for device " + d.str() + " in this build");
  return *r;
}

// The device every (non-empty) input lives on; throws when they differ.
inline Device same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t || !*t) continue;
    if (!first) first = t;
    else if (!(t->device() == first->device()))
      fail(op, "inputs on different devices (" + first->device().str() + " and " + t->device().str() + ")");
  }
  return first ? first->device() : Device::cpu();
}

// The one check of strided inputs: every op that does not take them (ops.h
// says which do) passes its tensors here, and a non-contiguous one is an
// error naming the op and the shape, never a silent copy.
inline void need_contiguous(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t && *t && !t->is_contiguous())
      fail(op, "input " + (t->name.empty() ? std::string() : t->name + " ") + shape_str(*t) +
                   " is strided, and " + op + " takes contiguous inputs only (ops::cont copies it)");
}

// same_device for an op that takes contiguous inputs only.
inline Device dense_inputs(const char* op, std::initializer_list<const Tensor*> ts) {
  need_contiguous(op, ts);
  return same_device(op, ts);
}

inline void need_type(const char* op, const Tensor& t, DType ty, const char* what) {
  if (t.type != ty)
    fail(op, std::string(what) + " must be " + dtype_name(ty) + ", is " + dtype_name(t.type) + " " + shape_str(t));
}

// A KV cache tensor: f16 or f32 (--cache-type-k / --cache-type-v).
inline void need_kv_type(const char* op, const Tensor& t, const char* what) {
  if (t.type != DType::F16 && t.type != DType::F32)
    fail(op, std::string(what) + " must be f16 or f32, is " + dtype_name(t.type) + " " + shape_str(t));
}

// Checks cost nothing on success: the message is only built on failure.
#define KVAD_NEED(op, ok, why) \
  do {                         \
    if (!(ok)) fail(op, why);  \
  } while (0)

template <class F>
const F& entry(const F& f, Device d, const char* op) {
  if (!f) fail(op, std::string("not implemented on ") + d.str());
  return f;
}

// A variant of an entry that the row refuses (BackendOps::refuses).
inline void need_variant(const BackendOps& r, Op v, Device d, const char* op) {
  if (r.refuses.has(v)) fail(op, std::string(op_name(v)) + " is not implemented on " + d.str());
}

inline Tensor f32_like(const Tensor& x, std::array<int64_t, 4> ne) { return empty(DType::F32, ne, x.device()); }

}  // namespace kvad::ops::detail
