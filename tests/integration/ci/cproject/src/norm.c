#include <math.h>
#include "vecmath.h"

double vm_norm(const double *a, size_t n) { return sqrt(vm_dot(a, a, n)); }
