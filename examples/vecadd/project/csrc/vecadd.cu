// vecadd: element-wise vector addition on the GPU, written for CUDA.
// The Python module exposes add(a, b) plus two queries of the runtime, so a machine without a
// GPU can still check that the module and its runtime load (device_count() reports the error).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cuda_runtime.h>

#include <vector>

#ifndef VECADD_BLOCK
#define VECADD_BLOCK 1024
#endif

__global__ void vecadd_kernel(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = a[i] + b[i];
  }
}

static PyObject* raise_cuda(cudaError_t err, const char* what) {
  PyErr_Format(PyExc_RuntimeError, "%s failed: %s (%d)", what, cudaGetErrorName(err),
               static_cast<int>(err));
  return nullptr;
}

static bool to_floats(PyObject* seq, std::vector<float>& out) {
  PyObject* fast = PySequence_Fast(seq, "expected a sequence of numbers");
  if (fast == nullptr) {
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  out.resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] =
        static_cast<float>(PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i)));
  }
  Py_DECREF(fast);
  return !PyErr_Occurred();
}

static PyObject* add(PyObject*, PyObject* args) {
  PyObject *pa, *pb;
  if (!PyArg_ParseTuple(args, "OO", &pa, &pb)) {
    return nullptr;
  }
  std::vector<float> a, b;
  if (!to_floats(pa, a) || !to_floats(pb, b)) {
    return nullptr;
  }
  if (a.size() != b.size()) {
    PyErr_SetString(PyExc_ValueError, "a and b must have the same length");
    return nullptr;
  }
  int n = static_cast<int>(a.size());
  size_t bytes = a.size() * sizeof(float);
  float *da = nullptr, *db = nullptr, *dout = nullptr;
  cudaError_t err = cudaMalloc(&da, bytes);
  if (err != cudaSuccess) {
    return raise_cuda(err, "cudaMalloc");
  }
  cudaMalloc(&db, bytes);
  cudaMalloc(&dout, bytes);
  cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice);
  int blocks = (n + VECADD_BLOCK - 1) / VECADD_BLOCK;
  vecadd_kernel<<<blocks, VECADD_BLOCK>>>(da, db, dout, n);
  err = cudaGetLastError();
  std::vector<float> out(a.size());
  if (err == cudaSuccess) {
    err = cudaMemcpy(out.data(), dout, bytes, cudaMemcpyDeviceToHost);
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dout);
  if (err != cudaSuccess) {
    return raise_cuda(err, "vecadd_kernel");
  }
  PyObject* result = PyList_New(n);
  for (int i = 0; i < n; ++i) {
    PyList_SET_ITEM(result, i, PyFloat_FromDouble(out[static_cast<size_t>(i)]));
  }
  return result;
}

static PyObject* device_count(PyObject*, PyObject*) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  return Py_BuildValue("(ii)", static_cast<int>(err), count);
}

static PyObject* runtime_version(PyObject*, PyObject*) {
  int version = 0;
  cudaError_t err = cudaRuntimeGetVersion(&version);
  if (err != cudaSuccess) {
    return raise_cuda(err, "cudaRuntimeGetVersion");
  }
  return PyLong_FromLong(version);
}

static PyMethodDef methods[] = {
    {"add", add, METH_VARARGS, "add(a, b) -> list: element-wise a + b on the GPU"},
    {"device_count", device_count, METH_NOARGS,
     "device_count() -> (error code, count) from the runtime"},
    {"runtime_version", runtime_version, METH_NOARGS, "runtime_version() -> int"},
    {nullptr, nullptr, 0, nullptr},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_vecadd", nullptr, -1, methods};

PyMODINIT_FUNC PyInit__vecadd(void) { return PyModule_Create(&module); }
