"""What every adapter of a foreign config shares: the key report, the jaxtrain target config,
names resolved offline, the architectures the zoo builds, YAML reading, and the fp8 and
pipeline keys.
"""
