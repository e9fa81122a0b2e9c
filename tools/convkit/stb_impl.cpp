// The one translation unit that compiles stb_image / stb_image_write (when stb is available).
#ifdef CONVKIT_HAVE_STB
#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
// PNG, BMP and PNM only: see the NOTE in image.hpp (the JPEG decoder failed the fuzzer).
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_ONLY_PNM
#include "stb_image.h"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include "stb_image_write.h"
#endif
