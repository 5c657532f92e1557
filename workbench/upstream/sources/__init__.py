"""Where upstream sources come from: releases on PyPI, their unpacked trees and checkouts, replay environments."""
