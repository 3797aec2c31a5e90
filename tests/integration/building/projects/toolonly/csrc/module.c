#define PY_SSIZE_T_CLEAN
#include <Python.h>

int toolonly_scale(float* x, int n);

static PyObject* scale_nothing(PyObject* self, PyObject* args) {
  return PyLong_FromLong(toolonly_scale(NULL, 0));
}

static PyMethodDef methods[] = {
    {"scale_nothing", scale_nothing, METH_NOARGS, "Launch on zero elements; HIP's status."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
