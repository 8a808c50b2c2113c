/* The plan's LoRA adapter slots by name (plan/plan.h): shared by the merge graph's builder and the
 * runtime, so neither needs the other. */
#include "plan/plan.h"

#include <string.h>

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int gp_lora_is_slot(const char *weight_name)
{
    return weight_name && !strncmp(weight_name, GP_LORA_PREFIX, strlen(GP_LORA_PREFIX)) &&
           (ends_with(weight_name, GP_LORA_A_SUFFIX) || ends_with(weight_name, GP_LORA_B_SUFFIX));
}
