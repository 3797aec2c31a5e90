#pragma once
extern "C" int fixture_torch_scale(float* data, int n, float factor);
extern "C" int fixture_torch_device_count();
