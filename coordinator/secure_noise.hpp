#pragma once
// The daemon's differential-privacy noise (engine/noise.hpp's transform) from mbedTLS's
// CTR_DRBG (AES-256, NIST SP 800-90A), seeded from the system's entropy: nobody, the
// operator included, can reproduce or subtract it. Not synchronized (the engine strand).

#include <memory>

#include "starling/util/status.hpp"

#include "engine/noise.hpp"

namespace starling::coordinator {

Result<std::unique_ptr<GaussianNoise>> secureNoise();

}  // namespace starling::coordinator
