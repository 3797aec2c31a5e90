extern "C" int scale_launch(float* x, float by);

extern "C" int scale_twice(float* x) { return scale_launch(x, 2.0f); }
