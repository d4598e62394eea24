/* TensorBoard event files' checksums (lib/run/tblog.h): CRC-32C against
 * its published check value and the test vectors of RFC 3720 (iSCSI),
 * B.4, and TFRecord's mask. */
#include "run/tblog.h"
#include "unit.h"

#include <string.h>

static void test_crc32c_check_values(void)
{
	unsigned char zeros[32], ones[32], up[32];

	memset(zeros, 0, sizeof zeros);
	memset(ones, 0xFF, sizeof ones);
	for (int i = 0; i < 32; i++)
		up[i] = (unsigned char)i;
	CHECK(tblog_crc32c("123456789", 9) == 0xE3069283u);
	CHECK(tblog_crc32c("", 0) == 0);
	CHECK(tblog_crc32c(zeros, sizeof zeros) == 0x8A9136AAu);
	CHECK(tblog_crc32c(ones, sizeof ones) == 0x62A8AB43u);
	CHECK(tblog_crc32c(up, sizeof up) == 0x46DD794Eu);
}

/* TFRecord masks a CRC by rotating it right 15 bits and adding
 * 0xA282EAD8: 0 is the constant; 1 rotated is 0x20000. */
static void test_mask(void)
{
	CHECK(tblog_mask(0) == 0xA282EAD8u);
	CHECK(tblog_mask(1) == 0xA282EAD8u + 0x20000u);
	CHECK(tblog_mask(0x8000u) == 0xA282EAD8u + 1u);
}

int main(void)
{
	RUN(test_crc32c_check_values);
	RUN(test_mask);
	return UNIT_END();
}
