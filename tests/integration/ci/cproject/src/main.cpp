#include <cstdio>
#include "vecmath.h"

int main() {
    double v[3] = {3.0, 4.0, 0.0};
    vm_scale(v, 3, 2.0);
    std::printf("%.1f %.1f\n", vm_norm(v, 3), vm_mean(v, 3));
    return 0;
}
