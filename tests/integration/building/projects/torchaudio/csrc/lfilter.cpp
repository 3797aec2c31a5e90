// Host code only, as torchaudio >= 2.9 on ROCm: its CUDA sources are built only with CUDA on.
#include "fixture_torch.h"

extern "C" int fixture_audio_channels() { return fixture_torch_device_count() + 1; }
