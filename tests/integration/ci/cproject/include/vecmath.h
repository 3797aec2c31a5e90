#ifndef VECMATH_H
#define VECMATH_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
double vm_dot(const double *a, const double *b, size_t n);
double vm_norm(const double *a, size_t n);
void vm_scale(double *a, size_t n, double k);
double vm_mean(const double *a, size_t n);
#ifdef __cplusplus
}
#endif
#endif
