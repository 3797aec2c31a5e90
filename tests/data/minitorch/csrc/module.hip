#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <hip/hip_runtime.h>

__global__ void fill(float* out, float value) { out[threadIdx.x] = value; }

static PyObject* arch_flags(PyObject*, PyObject*) { return PyUnicode_FromString(ARCH_FLAGS); }

static PyObject* device_count(PyObject*, PyObject*) {
  int count = 0;
  if (hipGetDeviceCount(&count) != hipSuccess) {
    count = 0;
  }
  return PyLong_FromLong(count);
}

static PyMethodDef methods[] = {
    {"_cuda_getArchFlags", arch_flags, METH_NOARGS, nullptr},
    {"_cuda_getDeviceCount", device_count, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
