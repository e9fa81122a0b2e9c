// The one translation unit that compiles stb_image / stb_image_write (when stb is available).
#ifdef CONVKIT_HAVE_STB
#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
// PNG and BMP only: see the NOTE in image.hpp (the JPEG and PNM decoders failed the fuzzer).
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#include "stb_image.h"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include "stb_image_write.h"
#endif
