"""What every adapter of a foreign config shares: the key report, the jaxtrain target config,
names resolved offline, the architectures the zoo builds, YAML reading, the jaxtrain fp8 recipe
a stack's fp8 keys become, and where a stack's pipeline goes on the mesh.
"""
