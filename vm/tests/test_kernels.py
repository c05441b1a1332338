"""phxrig.kernels: version sort, series patterns, image package names."""

import unittest

from phxrig import kernels


class VersionSort(unittest.TestCase):
    def test_numeric(self):
        rels = ["6.12.9+deb12-amd64", "6.12.117+deb12-amd64", "6.12.57+deb12-amd64"]
        self.assertEqual(sorted(rels, key=kernels.version_key)[-1], "6.12.117+deb12-amd64")
        self.assertEqual(sorted(["6.1.0-9-amd64", "6.1.0-57-amd64", "6.1.0-10-amd64"],
                                key=kernels.version_key)[-1], "6.1.0-57-amd64")

    def test_series_patterns_exclude_cloud_and_rt(self):
        pat = kernels.SERIES["6.12"].image
        self.assertTrue(pat.match("linux-image-6.12.117+deb12-amd64-unsigned"))
        self.assertFalse(pat.match("linux-image-6.12.117+deb12-cloud-amd64-unsigned"))
        self.assertFalse(pat.match("linux-image-6.12.117+deb12-rt-amd64-unsigned"))
        self.assertFalse(pat.match("linux-image-6.12.117+deb12-amd64"))
        self.assertTrue(kernels.SERIES["6.1"].image.match("linux-image-6.1.0-57-amd64-unsigned"))
        self.assertFalse(kernels.SERIES["6.1"].image.match("linux-image-6.12.117+deb12-amd64-unsigned"))
        sid = kernels.SERIES["7.2"].image
        self.assertEqual(sid.match("linux-image-7.2.13+deb14-amd64").group(1), "7.2.13+deb14-amd64")
        self.assertFalse(sid.match("linux-image-7.2.13+deb14-cloud-amd64"))
        self.assertFalse(sid.match("linux-image-7.2.13+deb14-amd64-dbg"))
        self.assertEqual(kernels.image_package("7.2", "7.2.13+deb14-amd64"),
                         "linux-image-7.2.13+deb14-amd64")
        self.assertEqual(kernels.image_package("6.1", "6.1.0-57-amd64"),
                         "linux-image-6.1.0-57-amd64-unsigned")
