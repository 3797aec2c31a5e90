#pragma once
// stands for torch's composable_kernel submodule
