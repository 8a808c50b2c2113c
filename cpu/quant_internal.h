/* Inside cpu/quant*.c: the k-quants' packed 6-bit scales and mins (cpu/quant.h's table). */
#ifndef GP_CPU_QUANT_INTERNAL_H
#define GP_CPU_QUANT_INTERNAL_H

#include <stdint.h>

/* q4_k / q5_k: the eight 6-bit scales and mins of a super-block's 12 packed bytes. */
static inline void gp_quant_k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | (s[j] >> 6) << 4);
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | (s[j + 4] >> 6) << 4);
    }
}

#endif
