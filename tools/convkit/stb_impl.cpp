// The one translation unit that compiles stb_image / stb_image_write (when stb is available).
#ifdef CONVKIT_HAVE_STB
#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
#include "stb_image.h"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include "stb_image_write.h"
#endif
