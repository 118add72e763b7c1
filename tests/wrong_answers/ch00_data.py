"""The datasets page's plausible wrong answers: each must fail every hidden test of its question."""

STREAM = '''
def channel_stats_streaming(chunks):
    {body}
'''

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "the mean of the per-batch shares (small batches weigh as much as large ones)": '''
def padding_share(batches, pad_id=0):
    shares = [float((ids == pad_id).float().mean()) for ids in batches]
    return sum(shares) / len(shares)
''',
        "counts padding as token id 0 whatever pad_id says": '''
def padding_share(batches, pad_id=0):
    padded = sum(int((ids == 0).sum()) for ids in batches)
    return padded / sum(ids.numel() for ids in batches)
''',
    },
    "q2": {
        "forgets to scale the uint8 pixels to [0, 1]": '''
def standardize(images, mean, std):
    mean = torch.as_tensor(mean, dtype=torch.float32)[:, None, None]
    std = torch.as_tensor(std, dtype=torch.float32)[:, None, None]
    return (images.float() - mean) / std
''',
        "broadcasts the statistics over the width, not the channels": '''
def standardize(images, mean, std):
    mean = torch.as_tensor(mean, dtype=torch.float32)
    std = torch.as_tensor(std, dtype=torch.float32)
    return ((images.float() / 255).transpose(1, -1) - mean).transpose(1, -1) / std
''',
    },
    "q3": {
        "the mean of per-image stds (the folklore CIFAR-10 std)": STREAM.format(body='''
    x = torch.cat([c.double() / 255 for c in chunks])
    return x.mean(dim=(0, 2, 3)), x.std(dim=(2, 3), unbiased=False).mean(0)'''),
        "the mean of the per-chunk statistics (unequal chunks weigh alike)": STREAM.format(body='''
    means, stds = [], []
    for chunk in chunks:
        x = chunk.double() / 255
        means.append(x.mean(dim=(0, 2, 3)))
        stds.append(x.transpose(0, 1).reshape(3, -1).std(dim=1, unbiased=False))
    return torch.stack(means).mean(0), torch.stack(stds).mean(0)'''),
        "the sample std (divides by n - 1)": STREAM.format(body='''
    x = torch.cat([c.double() / 255 for c in chunks])
    return x.mean(dim=(0, 2, 3)), x.transpose(0, 1).reshape(3, -1).std(dim=1)'''),
    },
    "q4": {
        "the mean of the per-image stds": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return image_stds.double().mean(dim=0)
''',
        "the root of the mean per-image variance (leaves out the spread between images)": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return (image_stds.double() ** 2).mean(dim=0).sqrt()
''',
        "adds the stds, not the variances": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return image_stds.double().mean(dim=0) + image_means.double().std(dim=0, unbiased=False)
''',
        "every image weighs alike, whatever its size": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return ((image_stds.double() ** 2).mean(dim=0) + image_means.double().var(dim=0, unbiased=False)).sqrt()
''',
        "the sample variance of the means (n - 1)": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return ((image_stds.double() ** 2).mean(dim=0) + image_means.double().var(dim=0)).sqrt()
''',
    },
}
